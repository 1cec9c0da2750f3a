"""The interval modules of a :class:`~.depth_stack.ContinuousDepthStack`, and the state they share with it."""
from typing import Optional

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
        self.last_interval = None  # the index of the interval that ran last, None after a whole integration
        self.walk = None  # (next index, grad mode, its input X(t_i), the states after it) of an odeint solve
        self.deferred = None  # a list of (X(0), state) pairs to check, or None: check now


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
        """torch.jit.script calls this on every submodule first (a stack's intervals, an FX graph module's too): say
        why it cannot work."""
        raise RuntimeError(
            'TorchScript cannot compile the ODE depth of timm_odevit models (ContinuousDepthStack), '
            'whose solver is Python: use torch.compile, torch.export or torch.fx instead, or run eagerly'
        )

    def forward(
            self,
            x: torch.Tensor,
            attn_mask: Optional[torch.Tensor] = None,
            is_causal: bool = False,
    ) -> torch.Tensor:
        check_no_mask(attn_mask, is_causal)
        stack = self.stack
        shared = self.shared
        i = self.index
        if getattr(stack, str(i), None) is not self:
            raise RuntimeError(
                f'interval {i} was removed by a grid change to {len(stack)} intervals: take '
                'model.blocks[i] again, or trace the torch.fx graph again'
            )
        if self.training and stack.train_depth is not None:
            raise stack.drawn_error(f'interval {i} steps through')
        walk = shared.walk
        grad = torch.is_grad_enabled()
        if walk is not None and walk[2] is x and walk[:2] == (i, grad):
            states = walk[3]
            evals = 0
        else:
            states, evals = stack._advance(x, i, stack.solver)
        shared.walk = (i + 1, grad, states[0], states[1:]) if len(states) > 1 else None
        if shared.last_interval != i - 1:  # consecutive intervals (a walk) count together
            shared.nfe = 0
        shared.nfe += evals
        shared.last_interval = i
        return stack.checked(x, states[0])

    def extra_repr(self) -> str:
        h = self.stack.solver.h
        return f't=[{self.index * h:.4g}, {(self.index + 1) * h:.4g}]'
