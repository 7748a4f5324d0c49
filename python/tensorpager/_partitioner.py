"""torch's partitioner budget for compiled regions whose ratio the floor refuses.

Note [A partitioner budget for compiled regions]
A compiled region holds what it saves as one: its forward saves it all when
it returns, and its backward unpacks it all at once (Note [torch.compile] in
_compiled.py). A model compiled whole is one region, so no eviction takes
it below its peak, and the floor refuses every ratio below about 0.95 (Note
[Budget floor] in hooks/budget/budget_floor.cpp). What can lower a region's
saved set is the compiler: AOTAutograd's min-cut partitioner chooses what
the forward saves and what the backward recomputes, and
``torch._functorch.config.activation_memory_budget`` (1.0 by default: saved
for speed; 0.0: the region checkpointed whole) makes it save at most that
share of the activations, recomputing the cheapest of the rest. Of what
torch 2.11 offers this is the one that works on every device: Inductor's
activation offloading (``enable_activation_offloading``) offloads only
outputs a graph pass marks, and its offload and reload nodes are device
copies that the CPU cannot show; saved-tensor hooks already see every saved
tensor and cannot split a region's unpack.
  So where the floor refuses a ratio (at the boundary that resolves it) and a
compiled module has run under the budget, the tracker does not raise: it
sets the partitioner budget to the next of ``LADDER`` below the one in force,
resets dynamo so that the regions compile again with it (at their next call:
one more compile per budget), and measures another iteration on the same
ratio of the peak measured before (the program as the user wrote it). That
iteration decides: for a model compiled whole its own peak must be within the
ratio's bytes, since nothing is evicted from inside its one region (the floor
accepted a GPT at 0.4 whose iteration peaked above it, and the budget then
died of fragmentation); for compiled blocks, between which the runtime
evicts, the floor (Note [Budget floor]) decides, as for any program. A ratio
that the last budget leaves refused is refused, with each budget's figure
and the ratio that the lowest peak allows. The budgets are few on purpose:
each costs an iteration and a compile. When the budget block ends, the
configuration found is given back and the regions compile again with it at
their next call. Each budget set warns once, and the exit line of a managed
process says which was set last.
  Values: recomputing in the backward what the forward computed runs the
same operators on the same inputs, so with ``aot_eager`` (the operators
torch runs eagerly) the values are bit-identical to the same compiled
program without tensorpager; with Inductor a recomputed value is fused into
other kernels than the saved one was, which may round differently.
Measured: docs/decisions.md, Note [A partitioner budget for compiled regions].

Note [Random operators are saved]
Below 1.0, torch 2.11's partitioner may recompute a random operator (dropout,
``rand_like``) in the backward, where it draws other numbers than the forward
did: the gradient is silently wrong, and the generator is a draw further on
(pytorch/pytorch#190758, open when written; with or without Inductor, on the
CPU too). Its ``MUST_SAVE`` recompute policy is the one mark that both the
min-cut's bans and the memory budget's knapsack keep. So while a budget is
set, a joint-graph pass (``joint_custom_pass``, after any the user set)
marks each operator tagged ``nondeterministic_seeded`` and the values taken
from it ``MUST_SAVE``, unless they carry a policy already (a user's own
selective checkpoint). Under Inductor the tagged operator is the seeds
(``inductor_seeds``), from which a recomputed ``inductor_random`` draws the
same numbers. The AOTAutograd cache is off meanwhile: its key leaves the
pass out, so it could hand back a graph partitioned without it.
"""

from __future__ import annotations

import functools
import math
import operator
import warnings

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

LADDER = (0.5, 0.2, 0.1)  # 0.0 recomputes a whole region in its backward at once: no lower peak on a GPT


def save_random_values(graph: Any, inputs: Any, then: Any = None) -> Any:
    """A joint-graph pass: after `then` (the pass installed before, if any), marks what each random operator
    computes to be saved, never recomputed (Note [Random operators are saved]). Returns the graph."""
    import torch
    from torch.utils.checkpoint import CheckpointPolicy

    if then is not None:
        graph = then(graph, inputs)
    for node in graph.graph.nodes:
        if node.op != "call_function" or torch.Tag.nondeterministic_seeded not in getattr(node.target, "tags", ()):
            continue
        for n in (node, *(u for u in node.users if u.target is operator.getitem)):
            n.meta.setdefault("recompute", CheckpointPolicy.MUST_SAVE)  # a tag of the user's own checkpoint wins
    return graph


class Partitioner:
    """The partitioner budgets a budget block set, and what each iteration peaked at."""

    def __init__(self) -> None:
        self.chosen: float | None = None  # the budget in force, set by this block
        self.peaks: dict[float, int] = {}  # budget -> the peak reserved of the iteration compiled with it
        self._found: tuple[Any, ...] | None = None  # the configuration before the first budget set
        self._pass: Any = None  # the joint-graph pass set with it

    def lower(self) -> bool:
        """Sets the next budget of LADDER below the one in force and makes the
        compiled regions compile again; False, changing nothing, where none is left."""
        import torch._dynamo
        import torch._functorch.config as config

        lower = [a for a in LADDER if a < config.activation_memory_budget]
        if not lower:
            return False
        if self._found is None:
            found = self._found = (config.activation_memory_budget, config.joint_custom_pass,
                                   config.enable_autograd_cache)
            config.joint_custom_pass = self._pass = functools.partial(save_random_values, then=found[1])
            config.enable_autograd_cache = False  # its key leaves the joint pass out
        config.activation_memory_budget = self.chosen = lower[0]
        torch._dynamo.reset()  # the regions compile again at their next call, with the new budget
        warnings.warn(f"tensorpager: the budget's ratio is below what the compiled regions hold at once: they compile"
                      f" again with torch's activation_memory_budget {self.chosen:g}, their backward recomputing what"
                      " they no longer save, and the next iteration measures them (Note [A partitioner budget for"
                      " compiled regions] in tensorpager/_partitioner.py)", RuntimeWarning, stacklevel=2)
        return True

    def refusal(self, ratio: float, peak: int) -> str:
        """The message refusing ratio of peak bytes, which no budget of LADDER brought an iteration within."""
        mib = 1 << 20
        tried = ", ".join(f"{a:g} peaked at {p / mib:.1f} MiB" for a, p in self.peaks.items())
        best = min(self.peaks.values())
        return (f"tensorpager: Budget: ratio {ratio:.2f} of the measured peak ({peak / mib:.1f} MiB reserved) is"
                f" {int(ratio * peak) / mib:.1f} MiB, and the model runs compiled: a compiled region holds what it"
                f" saves at once. Compiled again with torch's activation_memory_budget, an iteration at {tried}. The"
                f" smallest budget that could work is at least {best / mib:.1f} MiB (ratio"
                f" {math.ceil(best / peak * 100 - 1e-9) / 100:.2f} of the peak): the budget is refused")

    def close(self) -> None:
        """Gives back the configuration found, each value unless someone changed it since, and makes the
        compiled regions compile again with it at their next call."""
        if self._found is None:
            return
        import torch._dynamo
        import torch._functorch.config as config

        budget, joint_pass, cache = self._found
        self._found = None
        if config.joint_custom_pass is self._pass:
            config.joint_custom_pass, config.enable_autograd_cache = joint_pass, cache
        if config.activation_memory_budget == self.chosen:
            config.activation_memory_budget = budget
        torch._dynamo.reset()
