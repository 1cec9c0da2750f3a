"""Solver configuration and the single call into torchdiffeq.

What the vector field is lives in the models; how it is integrated lives here. A
:class:`SolverConfig` names a torchdiffeq method and its settings and validates them; the
:func:`solve` function integrates ``dx/dt = func(t, x)`` on the uniform grid
``t_k = k · t_end / steps`` and returns the state at the requested grid indices.
"""
import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Sequence

import torch
from torchdiffeq import odeint, odeint_adjoint

# fixed-grid methods -> vector-field evaluations per step (torchdiffeq's implementations)
FIXED_GRID_METHODS: Dict[str, int] = {
    'euler': 1,
    'midpoint': 2,
    'heun2': 2,
    'heun3': 3,
    'rk4': 4,
    'explicit_adams': 1,
    'implicit_adams': 2,  # predictor + one corrector evaluation with the default max_iters
}
ADAPTIVE_METHODS = ('dopri5', 'dopri8', 'bosh3', 'fehlberg2', 'adaptive_heun')
METHODS = tuple(FIXED_GRID_METHODS) + ADAPTIVE_METHODS
# the fixed-grid methods that make exactly FIXED_GRID_METHODS[m] evaluations every step (the Adams ones vary)
RUNGE_KUTTA_METHODS = ('euler', 'midpoint', 'heun2', 'heun3', 'rk4')


@dataclass(frozen=True)
class SolverConfig:
    """How to integrate an ODE field over t ∈ [0, t_end].

    Args:
        method: a torchdiffeq method name: fixed grid (``euler``, ``midpoint``, ``heun2``, ``heun3``,
            ``rk4``, ``explicit_adams``, ``implicit_adams``) or adaptive (``dopri5``, ``dopri8``,
            ``bosh3``, ``fehlberg2``, ``adaptive_heun``).
        steps: number of uniform grid steps. Fixed-grid methods take exactly these steps;
            adaptive methods choose their own steps and report the state at these grid points.
        step_size: alternative to ``steps``: the grid uses ``ceil(t_end / step_size)`` steps
            (so the actual step is ≤ step_size and lands exactly on t_end).
        t_end: integration horizon (the model's depth scale s makes [0, 1] ≡ [0, s]).
        rtol, atol: tolerances of adaptive methods.
        adjoint: backpropagate with the adjoint method (O(1) memory in the number of steps).
        check_finite: raise ``FloatingPointError`` when the final state holds NaN/Inf (one check
            per integration, not per step). Disable in loops that handle it themselves.
        options: extra torchdiffeq options (e.g. ``{'max_num_steps': 1000}`` for adaptive methods).
    """
    method: str = 'euler'
    steps: int = 12
    step_size: Optional[float] = None
    t_end: float = 1.0
    rtol: float = 1e-3
    atol: float = 1e-4
    adjoint: bool = False
    check_finite: bool = True
    options: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f'Unknown ODE solver {self.method!r}; choose one of {", ".join(METHODS)}')
        if not (isinstance(self.t_end, (int, float)) and math.isfinite(self.t_end) and self.t_end > 0):
            raise ValueError(f't_end must be a finite number > 0, got {self.t_end!r}')
        if self.step_size is not None:
            if not (isinstance(self.step_size, (int, float)) and math.isfinite(self.step_size) and self.step_size > 0):
                raise ValueError(f'step_size must be a finite number > 0, got {self.step_size!r}')
            object.__setattr__(self, 'steps', max(1, math.ceil(self.t_end / self.step_size - 1e-9)))
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 1:
            raise ValueError(f'steps must be an integer >= 1, got {self.steps!r}')
        for name in ('rtol', 'atol'):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value > 0):
                raise ValueError(f'{name} must be a number > 0, got {value!r}')
        if not isinstance(self.options, dict):
            raise TypeError(f'options must be a dict, got {type(self.options).__name__}')
        reserved = {'grid_constructor', 'step_size', 'norm'} & set(self.options)
        if reserved:
            raise ValueError(f'options {sorted(reserved)} are set by SolverConfig; use steps / step_size instead')

    @property
    def is_adaptive(self) -> bool:
        return self.method in ADAPTIVE_METHODS

    @property
    def evals_per_step(self) -> Optional[int]:
        """Vector-field evaluations per grid step for fixed-grid methods (None when adaptive)."""
        return FIXED_GRID_METHODS.get(self.method)

    def exact_evals(self, steps: int) -> Optional[int]:
        """Field evaluations of ``steps`` grid steps when the method fixes them (Runge–Kutta), else None."""
        return steps * FIXED_GRID_METHODS[self.method] if self.method in RUNGE_KUTTA_METHODS else None

    @property
    def h(self) -> float:
        return self.t_end / self.steps

    def replace(self, **changes) -> 'SolverConfig':
        """A validated copy with ``changes``; giving ``steps`` alone clears ``step_size``."""
        if 'steps' in changes and 'step_size' not in changes:
            changes['step_size'] = None
        if 't_end' in changes and 'step_size' not in changes and 'steps' not in changes and self.step_size is None:
            # keep the step length when only the horizon changes
            changes['steps'] = max(1, round(changes['t_end'] / self.h))
        return dataclasses.replace(self, **changes)

    def describe(self) -> str:
        tol = f', rtol={self.rtol:g}, atol={self.atol:g}' if self.is_adaptive else ''
        return (f'method={self.method!r}, steps={self.steps}, h={self.h:.4g}, t_end={self.t_end:g}{tol}, '
                f'adjoint={self.adjoint}')

    def grid(self, device=None, dtype=torch.float32) -> torch.Tensor:
        """The uniform time grid t_0 = 0, …, t_steps = t_end, shape (steps + 1,)."""
        return torch.linspace(0., self.t_end, self.steps + 1, device=device, dtype=dtype)


def _uniform_grid_constructor(grid: torch.Tensor, h: float) -> Callable:
    """torchdiffeq grid constructor: our canonical grid forward, a uniform h-grid otherwise (adjoint pass)."""
    def construct(func, y0, t):
        if t[0] == grid[0] and t[-1] == grid[-1]:
            return grid.to(t)
        n = max(1, int(round(abs(float(t[-1] - t[0])) / h)))
        return torch.linspace(t[0], t[-1], n + 1, device=t.device, dtype=t.dtype)
    return construct


def solve(
        func: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        x0: torch.Tensor,
        config: SolverConfig,
        indices: Sequence[int],
        adjoint_params: Sequence[torch.Tensor] = (),
) -> torch.Tensor:
    """Integrate dx/dt = func(t, x) from x(0) = x0 and return x(t_k) for k in ``indices``.

    Args:
        func: the vector field, called as func(t, x) with a 0-dim time tensor.
        x0: initial state, any shape.
        config: solver settings.
        indices: increasing grid indices in 1..config.steps; the integration stops at the last.
        adjoint_params: parameters of func (needed by the adjoint method).

    Returns:
        States stacked on a new first dimension, shape (len(indices), *x0.shape).
    """
    if not indices or any(b <= a for a, b in zip(indices, indices[1:])) or indices[0] < 1 or indices[-1] > config.steps:
        raise ValueError(f'indices must increase within 1..{config.steps}, got {list(indices)}')
    if x0.is_meta:  # no values to integrate: one evaluation checks shapes, the result keeps them
        func(torch.zeros((), device=x0.device), x0)
        return x0.new_empty((len(indices), *x0.shape))
    t_dtype = torch.float64 if x0.dtype == torch.float64 else torch.float32
    grid = config.grid(device=x0.device, dtype=t_dtype)[:indices[-1] + 1]
    t = grid[[0, *indices]] if len(indices) < len(grid) - 1 else grid
    options = dict(config.options)
    kwargs = {}
    if config.is_adaptive:
        kwargs.update(rtol=config.rtol, atol=config.atol)
    else:
        options['grid_constructor'] = _uniform_grid_constructor(grid, config.h)
    try:
        if config.adjoint:
            states = odeint_adjoint(
                func, x0, t, method=config.method, options=options, adjoint_params=tuple(adjoint_params), **kwargs)
        else:
            states = odeint(func, x0, t, method=config.method, options=options, **kwargs)
    except AssertionError as e:  # torchdiffeq signals a failed adaptive solve (e.g. 'underflow in dt nan')
        raise FloatingPointError(f'ODE solver failed ({config.describe()}): {e}') from e
    states = states[1:]
    if config.check_finite:
        assert_finite(states[-1], f'integrating with {config.describe()}')
    return states


def assert_finite(state: torch.Tensor, during: str) -> None:
    """Raise FloatingPointError if ``state`` holds NaN/Inf (one reduction, one host sync)."""
    if not state.is_meta and not bool(torch.isfinite(state).all()):
        raise FloatingPointError(
            f'ODE state became non-finite (NaN/Inf) while {during}. The dynamics blew up: use more '
            'steps, a stabler solver or a smaller depth scale, or pass check_finite=False to handle it yourself.')
