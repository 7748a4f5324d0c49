"""What the budget's hooks do under torch.compile.

Note [torch.compile]
torch.compile traces Python, and the module and saved-tensor hooks are
Python: traced, they would either break the trace (pybind calls, per-call
state) or be baked into the graph. So every hook returns at once while
torch.compile traces (``torch.compiler.is_compiling()``); the compiled code
runs with the hooks left out, and unpack hands back a tensor that a compiled
graph saved itself. What that gives (``tests/python/test_compile.py``):

- ``torch.compile(model)``: the compiled graph saves through tensorpager's
  hooks when it runs (as many saved tensors managed as in eager), but its
  forward holds every activation until it returns and its backward unpacks
  them all at once, so no budget below the region's peak fits;
- ``module.compile()`` on each block: the hooks are traced into the graph,
  as nothing, and the blocks' saved tensors are not managed at all (the
  budget floor says so at the first step).

In both, values stay bit-identical to the same compiled model without a
budget. The first compiled module the tracker sees gets one warning saying
this. Measured: docs/decisions.md, Note [torch.compile].
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

WARNING = (
    "tensorpager: a torch.compile'd module runs under the budget. The activations of a compiled region stay on"
    " the device until it returns, and its backward needs them all at once (a module compiled in place with"
    " .compile() saves them outside tensorpager's reach), so a budget below the region's peak runs out of memory;"
    " values stay exact. Leave the layers that hold most activations uncompiled to train below the peak"
    " (Note [torch.compile] in tensorpager/_compiled.py)."
)


def compiled(module: Any) -> bool:
    """Whether module runs compiled: torch.compile(module) or module.compile()."""
    return type(module).__name__ == "OptimizedModule" or getattr(module, "_compiled_call_impl", None) is not None


def compiling() -> bool:
    """Whether torch.compile is tracing this call (Note [torch.compile])."""
    import torch

    return torch.compiler.is_compiling()
