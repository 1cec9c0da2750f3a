"""ODEBlock: a continuous-depth layer integrating a token vector field with torchdiffeq."""
from typing import List, Optional

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from timm.layers import DropBlock2d, DropPath, register_notrace_module

from .solver import RUNGE_KUTTA_METHODS, SolverConfig, solve


def active_stochastic_modules(module: nn.Module) -> List[str]:
    """Names of the submodules that make ``module`` random in its current mode: dropout with p > 0
    and drop-path / drop-block with drop_prob > 0, in training mode."""
    def active(m):
        if isinstance(m, nn.modules.dropout._DropoutNd):
            return m.training and m.p > 0
        return isinstance(m, (DropPath, DropBlock2d)) and m.training and m.drop_prob > 0
    return [name or type(module).__name__ for name, m in module.named_modules() if active(m)]


@register_notrace_module  # torch.fx treats the whole integration as one leaf call
class ODEBlock(nn.Module):
    """Maps tokens X(0) (B, N, D) to X(t_end) by integrating dX/dt = field(t, X).

    ``field`` is any module called as ``field(t, x)`` (0-dim time tensor, state (B, N, D)).
    The solver settings live in ``self.solver`` (a :class:`SolverConfig`) and can be changed at
    any time with :meth:`set_solver`. After each forward, ``self.nfe`` holds the number of field
    evaluations it made (backward evaluations of the adjoint method are not counted). For the
    Runge–Kutta grids it is steps × stages, computed rather than counted, so that no Python counter
    changes inside the integration (torch.compile would specialise on it and recompile every call);
    the Adams and adaptive methods make a varying number of evaluations, which are counted.

    A field that is random in training mode (dropout, drop-path) is refused with the adjoint method
    (its backward pass re-samples the masks, so the gradient is not the gradient of the forward) and
    with adaptive methods (the error estimate measures the noise, so step control is meaningless).
    """

    def __init__(self, field: nn.Module, solver: Optional[SolverConfig] = None):
        super().__init__()
        self.field = field
        self.solver = solver if solver is not None else SolverConfig()
        self.grad_checkpointing = False
        self.nfe = 0
        self._evals = 0

    @property
    def num_time_points(self) -> int:
        """Number of grid points after t = 0 (the 'layers' of forward_intermediates)."""
        return self.solver.steps

    def time_points(self) -> torch.Tensor:
        """Times t_1 … t_steps of the states that forward_intermediates indexes, shape (steps,)."""
        return self.solver.grid()[1:]

    def set_solver(self, **changes) -> SolverConfig:
        """Change solver settings (method, steps, step_size, rtol, atol, adjoint, ...); returns the new config."""
        self.solver = self.solver.replace(**changes)
        return self.solver

    def truncate(self, num_points: int) -> None:
        """Keep the first ``num_points`` grid points: horizon num_points·h, same step length."""
        self.set_solver(t_end=self.solver.h * num_points, steps=num_points)

    def _rhs(self, t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        if self.solver.method not in RUNGE_KUTTA_METHODS:  # those are counted by SolverConfig.exact_evals
            self._evals += 1
        if self.grad_checkpointing and torch.is_grad_enabled() and not self.solver.adjoint:
            return checkpoint(self.field, t, x, use_reentrant=False)
        return self.field(t, x)

    def _check_deterministic_field(self) -> None:
        cfg = self.solver
        if not (cfg.adjoint or cfg.is_adaptive):
            return
        stochastic = active_stochastic_modules(self.field)
        if stochastic:
            why = ('the adjoint backward pass re-samples the dropout masks, so its gradient is not the gradient '
                   'of the forward pass' if cfg.adjoint else
                   f'the adaptive {cfg.method!r} would control its step size on the dropout noise')
            raise ValueError(
                f'The ODE field is random in training mode (active: {", ".join(stochastic)}) and {why}. Set those '
                'drop rates to 0, or integrate with adjoint=False and a fixed-grid method '
                '(e.g. set_solver(method="rk4", adjoint=False)); eval mode is fine.')

    def trajectory(self, x: torch.Tensor, indices: List[int]) -> torch.Tensor:
        """States at grid indices (0-based: index i is t_{i+1}), shape (len(indices), B, N, D).

        Integration stops at the largest index.
        """
        self._check_deterministic_field()
        self._evals = 0
        states = solve(
            self._rhs, x, self.solver, [i + 1 for i in indices],
            adjoint_params=tuple(self.field.parameters()),
        )
        exact = self.solver.exact_evals(indices[-1] + 1)
        self.nfe = exact if exact is not None else self._evals
        return states

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """X(0) (B, N, D) -> X(t_end) (B, N, D)."""
        return self.trajectory(x, [self.solver.steps - 1])[-1]

    def extra_repr(self) -> str:
        return self.solver.describe()
