"""Solver configuration and the single call into torchdiffeq.

What the vector field is lives in the models; how it is integrated lives here. A
:class:`SolverConfig` names a torchdiffeq method and its settings and validates them; the
:func:`solve` function integrates ``dx/dt = func(t, x)`` on the uniform grid
``t_k = k · t_end / steps`` (from any grid point t_start) and returns the state at the requested grid indices.
"""
import dataclasses
import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import torch
from torchdiffeq import odeint, odeint_adjoint
from torchdiffeq._impl.odeint import SOLVERS as _TORCHDIFFEQ_SOLVERS
from torchdiffeq._impl.solvers import FixedGridODESolver

from .._checks import is_int, is_real

# Runge–Kutta methods -> field evaluations per step, fixed by the Butcher tableau (torchdiffeq's rk4
# is the 3/8 rule: 4 stages). Their NFE is steps × stages, computed, never counted.
RUNGE_KUTTA_METHODS: Dict[str, int] = {'euler': 1, 'midpoint': 2, 'heun2': 2, 'heun3': 3, 'rk4': 4}
# multistep methods on the fixed grid: RK4 start-up steps, then a predictor (explicit) plus up to
# max_iters corrector iterations until convergence (implicit), so evaluations per step vary: counted
ADAMS_METHODS = ('explicit_adams', 'implicit_adams')
FIXED_GRID_METHODS = tuple(RUNGE_KUTTA_METHODS) + ADAMS_METHODS
ADAPTIVE_METHODS = ('dopri5', 'dopri8', 'bosh3', 'fehlberg2', 'adaptive_heun')
METHODS = FIXED_GRID_METHODS + ADAPTIVE_METHODS
MAX_STEPS = 10_000  # default cap on grid steps: a typo'd step_size must not start a billion-step solve
# torchdiffeq options that SolverConfig sets itself (or that solve() passes as arguments)
_RESERVED_OPTIONS = ('grid_constructor', 'step_size', 'norm', 'rtol', 'atol')


def solver_options(method: str) -> Tuple[str, ...]:
    """The torchdiffeq options ``method`` accepts in ``SolverConfig.options`` (read from the solver's signature)."""
    names = set()
    for cls in _TORCHDIFFEQ_SOLVERS[method].__mro__[:-1]:  # all but object
        if '__init__' in vars(cls):
            names |= {p.name for p in inspect.signature(cls.__init__).parameters.values()
                      if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return tuple(sorted(names - {'self', 'func', 'y0', 'implicit', *_RESERVED_OPTIONS}))


@dataclass(frozen=True)
class SolverConfig:
    """How to integrate an ODE field over t ∈ [0, t_end].

    Args:
        method: a torchdiffeq method name: fixed grid (``euler``, ``midpoint``, ``heun2``, ``heun3``,
            ``rk4``, ``explicit_adams``, ``implicit_adams``) or adaptive (``dopri5``, ``dopri8``,
            ``bosh3``, ``fehlberg2``, ``adaptive_heun``).
        steps: number of uniform grid steps (default 12). Fixed-grid methods take exactly these
            steps; adaptive methods choose their own steps and report the state at these grid points.
        step_size: alternative to ``steps``: the grid uses ``ceil(t_end / step_size)`` steps
            (so the actual step is ≤ step_size and lands exactly on t_end). Give one of the two.
        t_end: integration horizon (the model's depth scale s makes [0, 1] ≡ [0, s]).
        rtol, atol: tolerances of adaptive methods (finite numbers > 0).
        adjoint: backpropagate with the adjoint method (O(1) memory in the number of steps). Its gradients
            integrate the adjoint ODE backward on the same grid, so they approach backprop's through the solver
            only as the grid is refined: on a coarse fixed grid they differ by the discretisation error.
        check_finite: raise ``FloatingPointError`` when the final state holds NaN/Inf (one check
            per integration, not per step). Disable in loops that handle it themselves.
        options: extra torchdiffeq options of the method (e.g. ``{'max_num_steps': 1000}`` for
            adaptive methods); :func:`solver_options` lists them.
        max_steps: refuse grids of more steps than this (a guard against e.g. ``step_size=1e-9``).
    """
    method: str = 'euler'
    steps: Optional[int] = None
    step_size: Optional[float] = None
    t_end: float = 1.0
    rtol: float = 1e-3
    atol: float = 1e-4
    adjoint: bool = False
    check_finite: bool = True
    options: Dict[str, Any] = field(default_factory=dict)
    max_steps: int = MAX_STEPS

    @classmethod
    def from_model_args(cls, solver: str = 'euler', solver_options: Optional[Dict[str, Any]] = None,
                        **kwargs) -> 'SolverConfig':
        """The config from a model's keyword names (``solver`` → method, ``solver_options`` → options)."""
        return cls(method=solver, options=dict(solver_options or {}), **kwargs)

    def __post_init__(self):
        if not isinstance(self.method, str) or self.method not in METHODS:
            raise ValueError(f'Unknown ODE solver {self.method!r}; choose one of {", ".join(METHODS)}')
        for name in ('adjoint', 'check_finite'):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f'{name} must be True or False, got {getattr(self, name)!r} '
                                f'({type(getattr(self, name)).__name__}); a string such as "no" would count as True')
        for name in ('t_end', 'rtol', 'atol') + (('step_size',) if self.step_size is not None else ()):
            value = getattr(self, name)
            if not is_real(value):
                raise TypeError(f'{name} must be a number, got {value!r} ({type(value).__name__})')
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f'{name} must be a finite number > 0, got {value!r}')
            object.__setattr__(self, name, float(value))
        for name in ('steps', 'max_steps'):
            value = getattr(self, name)
            if value is not None and not is_int(value):
                raise TypeError(f'{name} must be an integer, got {value!r} ({type(value).__name__})')
            if value is not None and value < 1:
                raise ValueError(f'{name} must be an integer >= 1, got {value!r}')
        steps = None if self.steps is None else int(self.steps)
        if self.step_size is not None:
            from_size = max(1, math.ceil(self.t_end / self.step_size - 1e-9))
            if steps is not None and steps != from_size:
                raise ValueError(
                    f'steps={steps} and step_size={self.step_size:g} disagree (step_size gives {from_size} steps '
                    f'over t_end={self.t_end:g}); give only one of them')
            steps = from_size
        steps = 12 if steps is None else steps
        if steps > self.max_steps:
            raise ValueError(
                f'{steps} grid steps (t_end={self.t_end:g}, step_size={self.t_end / steps:.3g}) exceed '
                f'max_steps={self.max_steps}: use fewer steps / a larger step_size, an adaptive method '
                f'({", ".join(ADAPTIVE_METHODS)}), or raise max_steps if you mean it')
        object.__setattr__(self, 'steps', steps)
        object.__setattr__(self, 'max_steps', int(self.max_steps))
        if not isinstance(self.options, dict):
            raise TypeError(f'options must be a dict, got {type(self.options).__name__}')
        reserved = set(_RESERVED_OPTIONS) & set(self.options)
        if reserved:
            raise ValueError(f'options {sorted(reserved)} are set by SolverConfig; use steps / step_size / rtol / '
                             'atol instead')
        valid = solver_options(self.method)
        unknown = sorted(set(self.options) - set(valid))
        if unknown:
            raise ValueError(f'options {unknown} are not options of {self.method!r}; its options are '
                             f'{", ".join(valid) or "none"}')

    @property
    def is_adaptive(self) -> bool:
        return self.method in ADAPTIVE_METHODS

    @property
    def evals_per_step(self) -> Optional[int]:
        """Vector-field evaluations per grid step of Runge–Kutta methods (None for Adams and adaptive)."""
        return RUNGE_KUTTA_METHODS.get(self.method)

    def exact_evals(self, steps: int) -> Optional[int]:
        """Field evaluations of ``steps`` grid steps when the method fixes them (Runge–Kutta), else None."""
        return steps * RUNGE_KUTTA_METHODS[self.method] if self.method in RUNGE_KUTTA_METHODS else None

    @property
    def h(self) -> float:
        return self.t_end / self.steps

    def replace(self, **changes) -> 'SolverConfig':
        """A validated copy with ``changes``. ``steps`` and ``step_size`` replace each other; changing
        only ``t_end`` keeps the step length (``step_size``, or the current h)."""
        names = [f.name for f in dataclasses.fields(self)]
        unknown = sorted(set(changes) - set(names))
        if unknown:
            raise TypeError(f'unknown solver setting(s) {unknown}; valid: {", ".join(names)}')
        if 'steps' in changes and 'step_size' not in changes:
            changes['step_size'] = None
        elif 'step_size' in changes and 'steps' not in changes:
            changes['steps'] = None if changes['step_size'] is not None else self.steps
        elif 'steps' not in changes and 'step_size' not in changes:
            if self.step_size is not None:
                changes['steps'] = None  # recomputed from step_size (and the new t_end)
            elif 't_end' in changes and is_real(changes['t_end']) and changes['t_end'] > 0:
                steps = changes['t_end'] / self.h  # keep the step length
                if abs(steps - round(steps)) > 1e-6 * max(1., steps) or round(steps) < 1:
                    raise ValueError(
                        f't_end={changes["t_end"]:g} is not a whole number of steps of the current h={self.h:g} '
                        f'({self.steps} steps over t_end={self.t_end:g}); give a multiple of h, or give steps / '
                        'step_size with it')
                changes['steps'] = round(steps)
        return dataclasses.replace(self, **changes)

    def truncated(self, steps: int) -> 'SolverConfig':
        """The first ``steps`` grid steps: horizon steps·h, same step length."""
        return self.replace(t_end=self.h * steps, steps=steps)

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


def checks_enabled() -> bool:
    """False while torch.export / the dynamo ONNX exporter traces: the data-dependent finiteness checks
    (a host sync on a tensor's values) cannot be part of an exported graph, which propagates NaN/Inf to
    its outputs as timm's own ViT does."""
    return not torch.compiler.is_exporting()


def _steps_by_hand(config: SolverConfig) -> bool:
    """Runge–Kutta grids without the adjoint or extra options are stepped by :func:`solve` itself with
    torchdiffeq's step functions (the same arithmetic as ``odeint``): one solver step per grid interval, no
    data-dependent checks (exportable), and an interval integrated alone equals that step of the whole grid."""
    return config.method in RUNGE_KUTTA_METHODS and not config.adjoint and not config.options


def _no_perturb(func: Callable) -> Callable:
    def step_func(t, x, perturb=None):  # torchdiffeq's step functions pass perturb=; only odeint handles it
        return func(t, x)
    return step_func


def _check_precision(x0: torch.Tensor, config: SolverConfig) -> None:
    if not config.is_adaptive:
        return
    dtype = x0.dtype
    if dtype not in (torch.float16, torch.bfloat16):
        return
    eps = torch.finfo(dtype).eps
    if config.rtol < eps or config.atol < eps:
        raise ValueError(
            f'the adaptive {config.method!r} cannot meet rtol={config.rtol:g}, atol={config.atol:g} in {dtype} '
            f'(its precision is {eps:.2g}): the step-size controller would shrink the step until it underflows. '
            f'Use tolerances >= {eps:.2g} (set_solver(rtol=..., atol=...)), a fixed-grid method, or float32')


def solve(
        func: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        x0: torch.Tensor,
        config: SolverConfig,
        indices: Sequence[int],
        adjoint_params: Sequence[torch.Tensor] = (),
        start: int = 0,
) -> torch.Tensor:
    """Integrate dx/dt = func(t, x) from x(t_start) = x0 and return x(t_k) for k in ``indices``.

    Args:
        func: the vector field, called as func(t, x) with a 0-dim time tensor (the true time t_k).
        x0: state at grid point ``start``, any shape.
        config: solver settings.
        indices: increasing grid indices in start+1..config.steps; the integration stops at the last.
        adjoint_params: parameters of func (needed by the adjoint method).
        start: grid index of x0 (t_start = start·h); a multistep or adaptive method starts afresh there.

    Returns:
        States stacked on a new first dimension, shape (len(indices), *x0.shape), in storage of their own.
    """
    if (not indices or any(b <= a for a, b in zip(indices, indices[1:])) or indices[0] <= start
            or indices[-1] > config.steps):
        raise ValueError(f'indices must increase within {start + 1}..{config.steps}, got {list(indices)}')
    if x0.is_meta:  # no values to integrate: one evaluation checks shapes, the result keeps them
        func(torch.zeros((), device=x0.device), x0)
        return x0.new_empty((len(indices), *x0.shape))
    t_dtype = torch.float64 if x0.dtype == torch.float64 else torch.float32
    grid = config.grid(device=x0.device, dtype=t_dtype)[start:indices[-1] + 1]
    if _steps_by_hand(config):
        stepper: FixedGridODESolver = _TORCHDIFFEQ_SOLVERS[config.method](func=func, y0=x0, atol=config.atol)
        step, wanted, states, x = _no_perturb(func), set(indices), [], x0
        for k in range(1, len(grid)):
            t0, t1 = grid[k - 1], grid[k]
            dx, _ = stepper._step_func(step, t0, t1 - t0, t1, x)
            x = x + dx
            if k + start in wanted:
                states.append(x)
        states = torch.stack(states)
    elif x0.numel() == 0:  # an empty batch: torchdiffeq's step-size control divides by its zero-size norm
        dx = func(grid[0], x0)  # one evaluation checks the shapes and keeps the parameters in the graph
        states = torch.stack([x0 + 0 * dx] * len(indices))
    else:
        _check_precision(x0, config)
        t = grid[[0, *(i - start for i in indices)]] if len(indices) < len(grid) - 1 else grid
        options = dict(config.options)
        kwargs = {}
        if config.is_adaptive:
            kwargs.update(rtol=config.rtol, atol=config.atol)
        else:
            options['grid_constructor'] = _uniform_grid_constructor(grid, config.h)
        try:
            if config.adjoint:
                states = odeint_adjoint(func, x0, t, method=config.method, options=options,
                                        adjoint_params=tuple(adjoint_params), **kwargs)
            else:
                states = odeint(func, x0, t, method=config.method, options=options, **kwargs)
        except AssertionError as e:  # torchdiffeq signals a failed adaptive solve (e.g. 'underflow in dt nan')
            raise FloatingPointError(f'ODE solver failed ({config.describe()}): {e}') from e
        states = states[1:].clone()  # not a view into odeint's storage of x0 as well
    if config.check_finite and checks_enabled():
        assert_finite(states[-1], f'integrating with {config.describe()}')
    return states


def is_non_finite(t: torch.Tensor, message: str) -> bool:
    """Whether ``t`` holds NaN/Inf (one reduction, one host sync), for the caller to raise its error; under
    torch.compile an in-graph assert with ``message`` instead (RuntimeError; a host sync would break the graph, so
    ``fullgraph=True`` compiles), and False."""
    if torch.compiler.is_compiling():
        torch._assert_async(torch.isfinite(t).all(), message)
        return False
    return not t.is_meta and not bool(torch.isfinite(t).all())


def assert_finite(state: torch.Tensor, during: str) -> None:
    """Raise FloatingPointError if ``state`` holds NaN/Inf (:func:`is_non_finite`)."""
    message = (f'ODE state became non-finite (NaN/Inf) while {during}. The dynamics blew up: use more '
               'steps, a stabler solver or a smaller depth scale, or pass check_finite=False to handle it yourself.')
    if is_non_finite(state, message):
        raise FloatingPointError(message)
