"""What the budget's hooks do under torch.compile.

Note [torch.compile]
torch.compile traces Python, and tensorpager's module and saved-tensor hooks
are Python. Traced inline, a hook breaks the graph (pybind calls, per-call
state: a timeline's hooks crashed dynamo) or is baked into it. And where
code runs eagerly inside a compiled call (a module compiled in place, whose
``_call_impl`` torch does not trace; what follows a graph break), dynamo
compiles the frame of each Python function called, hooks included: traced
while ``is_compiling()``, such a frame did nothing: a block compiled in
place lost its module hooks (it was no segment), and where its layers ran
eagerly (torch's own, which dynamo does not compile), its saved tensors
went unmanaged too. Hence:

- the pair of global module hooks (whose subscribers are the tracker,
  timelines, operator traces and compression) and the budget's saved-tensor
  hooks are marked ``stay_eager`` (in _module_hooks.py, below this layer):
  dynamo never compiles a frame of theirs, nor of what they call, where one
  starts outside a traced region. It is a flag on the code object, free per
  call; ``torch.compiler.disable``'s
  wrapper costs about 0.6 us per call, twice per saved tensor;
- the module hooks return at once where dynamo traces them inline
  (``torch.compiler.is_compiling()``): a compiled graph holds nothing of
  them and breaks nowhere.

What that gives:

- ``module.compile()`` on each block: the block's hooks run eagerly around
  its compiled forward, so the block is a segment as in eager (Note
  [Segments] in _tracker.py): what its compiled graph saves passes through
  the saved-tensor hooks as ``CompiledFunction`` saves it, and is offloaded,
  or dropped and recomputed by running the compiled block again. The unit is
  the region: a compiled forward holds its intermediates until it returns,
  and its backward unpacks all it saved at once, so the budget must hold one
  block's saved tensors besides the rest. A module whose forward is torch's
  own (an ``nn.Sequential`` of torch layers) compiles to nothing in torch
  2.11 and runs eagerly, managed as eager.
- ``torch.compile(model)``: the hooks run eagerly for the ``OptimizedModule``
  and again for the model inside it (the extra call PyTorch warns of), and
  the forward is one region: it saves through the hooks (as many tensors
  managed as in eager), but no eviction takes it below the region's peak.
  What does is the compiler's own partitioner budget, which the budget
  sets where the floor refuses a ratio (Note [A partitioner budget for
  compiled regions] in _partitioner.py); blocks compiled in place get it
  too, below the ratios their segments reach.

Values stay bit-identical to the same compiled model without a budget. The
first compiled module the tracker sees gets one warning saying this.
Measured: docs/decisions.md, Note [torch.compile].
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

WARNING = (
    "tensorpager: a torch.compile'd module runs under the budget. Its saved tensors are managed per compiled region:"
    " a region holds its activations until it returns and its backward needs them all at once, so the budget must"
    " hold the largest region's activations besides the rest. Where a ratio budget is below that, the regions are"
    " compiled again with torch's activation_memory_budget, one iteration each (0.5, 0.2, 0.1), and the exit line"
    " says which; values stay exact with aot_eager. Compiling each block in place (block.compile()) lets the budget"
    " evict between blocks (Note [torch.compile] in tensorpager/_compiled.py)."
)


def compiled(module: Any) -> bool:
    """Whether module runs compiled: torch.compile(module) or module.compile()."""
    return type(module).__name__ == "OptimizedModule" or getattr(module, "_compiled_call_impl", None) is not None


def compiling() -> bool:
    """Whether torch.compile is tracing this call (Note [torch.compile])."""
    import torch

    return torch.compiler.is_compiling()
