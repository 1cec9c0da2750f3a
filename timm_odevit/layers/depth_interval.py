"""The interval modules of a :class:`~.depth_stack.ContinuousDepthStack`, and the state they share with it."""
from typing import List, Optional, Tuple

import torch
from torch import nn
from timm.layers import register_notrace_module

from .diagnostics import check_no_mask


class SharedDepthState:
    """What a stack shares with its slices ``stack[:n]`` (timm runs slices in forward_intermediates) and its
    intervals: the stack itself (``root``), the counters of the last forward, the rest of an ``odeint`` solve that
    the next interval continues (``walk``) and, while a model's forward runs, the finiteness checks left to it
    (``deferred``)."""

    def __init__(self, root: nn.Module):
        self.root = root
        self.nfe = 0
        self.walked = 0
        self.last_interval: Optional[int] = None
        self.walk: Optional[tuple] = None
        self.deferred: Optional[List[Tuple[torch.Tensor, torch.Tensor]]] = None


@register_notrace_module  # a leaf in torch.fx graphs: node 'blocks.i' is the state X(t_{i+1})
class DepthInterval(nn.Module):
    """Interval i of a :class:`ContinuousDepthStack`: X(t_i) (B, N, D) -> X(t_{i+1}) (B, N, D).

    For Runge–Kutta methods (and the recurrence) one step of the method from the x it is given, like a timm
    ``Block`` a function of its input and the weights. For Adams / adaptive methods interval i integrates from x to
    the end of the grid in one ``odeint`` call and returns X(t_{i+1}); the next interval, given that very tensor,
    returns the same solve's next state (the method's history and step size carry over), any other tensor (e.g.
    one a hook returned) starts a new solve there. Interval 0 registers the shared field (``blocks.0.field.*``), so
    timm's ViT ``group_matcher`` (``^blocks\\.(\\d+)``) puts it between stem and head; ``self.stack`` is reached
    through ``self.shared`` (:class:`SharedDepthState`), not a child module.
    """

    def __init__(self, shared: SharedDepthState, index: int, field: Optional[nn.Module] = None):
        super().__init__()
        self.shared = shared
        self.index = index
        if field is not None:
            self.field = field

    @property
    def stack(self) -> nn.Module:
        """The stack this interval belongs to."""
        return self.shared.root

    def __prepare_scriptable__(self):
        """torch.jit.script calls this on every submodule first (an FX graph module's intervals too)."""
        return self.stack.__prepare_scriptable__()

    def forward(
            self,
            x: torch.Tensor,
            attn_mask: Optional[torch.Tensor] = None,
            is_causal: bool = False,
    ) -> torch.Tensor:
        check_no_mask(attn_mask, is_causal)
        stack = self.stack
        if getattr(stack, str(self.index), None) is not self:
            raise RuntimeError(
                f'interval {self.index} was removed by a grid change to {len(stack)} intervals: take '
                'model.blocks[i] again, or trace the torch.fx graph again'
            )
        if self.training and stack.train_depth is not None:
            raise stack.drawn_error(f'interval {self.index} steps through')
        out = stack.run_interval(x, self.index)
        return stack.checked(x, out) if self.shared.deferred is None else out

    def extra_repr(self) -> str:
        h = self.stack.solver.h
        return f't=[{self.index * h:.4g}, {(self.index + 1) * h:.4g}]'
