"""How a continuous-depth stack integrates its field: :class:`SolverConfig`, the settings of the uniform grid
t_k = k·h, h = t_end / steps, and the methods it can be stepped with (:mod:`.stepping` steps it).

``'recurrence'`` is Euler with h = 1: on the state-subtracted field ż = B(z) − z its step z + (B(z) − z) is the
recurrence z_k = B(z_{k−1}).
"""
import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple, Union

import torch

from .._checks import check_dict, check_int, check_number, is_int, is_real

# method -> (c: stage times, a: stage weights (rows of the lower triangle), b: step weights)
_EULER = ((0.,), ((),), (1.,))
TABLEAUS: Dict[str, tuple] = {
    'euler': _EULER,
    'recurrence': _EULER,  # with h = 1 (SolverConfig pins it)
    'midpoint': ((0.0, 0.5), ((), (0.5,)), (0.0, 1.0)),
    'heun2': ((0.0, 1.0), ((), (1.0,)), (0.5, 0.5)),
    'heun3': ((0.0, 1 / 3, 2 / 3), ((), (1 / 3,), (0.0, 2 / 3)), (1 / 4, 0.0, 3 / 4)),
    'rk4': (
        (0.0, 1 / 3, 2 / 3, 1.0),
        ((), (1 / 3,), (-1 / 3, 1.0), (1.0, -1.0, 1.0)),
        (1 / 8, 3 / 8, 3 / 8, 1 / 8),
    ),
}
# field evaluations/step
RUNGE_KUTTA_METHODS: Dict[str, int] = {name: len(c) for name, (c, _, _) in TABLEAUS.items()}
ADAMS_METHODS = ('explicit_adams', 'implicit_adams')
ADAPTIVE_METHODS = ('dopri5', 'dopri8', 'bosh3', 'fehlberg2', 'adaptive_heun')
METHODS = tuple(RUNGE_KUTTA_METHODS) + ADAMS_METHODS + ADAPTIVE_METHODS
# default cap on grid steps: a typo'd step_size must not start a billion-step solve
MAX_STEPS = 10_000
_ADAPTIVE_OPTIONS = (
    'dfactor',
    'dtype',
    'first_step',
    'ifactor',
    'jump_t',
    'max_num_steps',
    'max_step',
    'min_step',
    'safety',
    'step_t',
)
# the torchdiffeq options each method takes in SolverConfig.options
OPTIONS: Dict[str, Tuple[str, ...]] = {
    **{m: () for m in RUNGE_KUTTA_METHODS},
    **{m: ('max_iters', 'max_order') for m in ADAMS_METHODS},
    **{m: _ADAPTIVE_OPTIONS for m in ADAPTIVE_METHODS},
}


@dataclass(frozen=True)
class SolverConfig:
    """How to integrate an ODE field over t ∈ [0, t_end].

    Args:
        method: a Runge–Kutta method stepped by the stack (``euler``, ``midpoint``, ``heun2``, ``heun3``, ``rk4``,
            ``recurrence``: Euler with h = 1, t_end = steps), a multistep one (``explicit_adams``,
            ``implicit_adams``) or an adaptive one (``dopri5``, ``dopri8``, ``bosh3``, ``fehlberg2``,
            ``adaptive_heun``), the last two kinds through torchdiffeq.
        steps: number of uniform grid steps (default 12). Fixed-grid methods take exactly these steps; adaptive
            methods choose their own and report the state at these grid points.
        step_size: alternative to ``steps``: the grid uses ``ceil(t_end / step_size)`` steps (so the actual step is
            ≤ step_size and lands exactly on t_end). Give one of the two.
        t_end: integration horizon (the model's depth scale s makes [0, 1] ≡ [0, s]).
        rtol, atol: tolerances of adaptive methods (finite numbers > 0).
        adjoint: backpropagate with torchdiffeq's adjoint method (O(1) memory in the number of steps); on a coarse
            fixed grid its gradients differ from backprop's by the discretisation error.
        check_finite: raise ``FloatingPointError`` when the final state holds NaN/Inf (one check per forward, in
            eager mode). Disable in loops that handle it themselves.
        options: extra torchdiffeq options of Adams / adaptive methods (``OPTIONS`` lists them), e.g.
            ``{'max_num_steps': 1000}``.
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

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f'Unknown ODE solver {self.method!r}: choose one of {", ".join(METHODS)}')
        for name in ('adjoint', 'check_finite'):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f'{name} must be True or False, got {getattr(self, name)!r}')
        for name in ('t_end', 'rtol', 'atol', 'step_size', 'steps', 'max_steps'):
            value = getattr(self, name)
            integer = name in ('steps', 'max_steps')
            if value is None and name in ('step_size', 'steps'):
                continue
            if not (is_int(value) if integer else is_real(value)):
                raise TypeError(f'{name} must be {"an integer" if integer else "a number"}, got {value!r}')
            value = check_int(name, value) if integer else check_number(name, value, positive=True)
            object.__setattr__(self, name, value)
        steps = self.steps
        if self.step_size is not None:
            from_size = max(1, math.ceil(self.t_end / self.step_size - 1e-9))
            if steps is not None and steps != from_size:
                raise ValueError(
                    f'steps={steps} and step_size={self.step_size:g} disagree (step_size gives '
                    f'{from_size} steps over t_end={self.t_end:g}): give only one of them'
                )
            steps = from_size
        steps = 12 if steps is None else steps
        if self.method == 'recurrence':  # one block application per unit of time
            if self.step_size not in (None, 1.):
                raise ValueError(
                    f'the recurrence steps by h = 1, got step_size={self.step_size:g}: set its iterations'
                )
            object.__setattr__(self, 't_end', float(steps))
        if steps > self.max_steps:
            raise ValueError(
                f'{steps} grid steps (t_end={self.t_end:g}) exceed max_steps={self.max_steps}: use fewer '
                'steps, an adaptive method, or raise max_steps if you mean it'
            )
        object.__setattr__(self, 'steps', steps)
        if not isinstance(self.options, dict):
            raise TypeError(f'options must be a dict of torchdiffeq options, got {type(self.options).__name__}')
        object.__setattr__(self, 'options', dict(self.options))  # a copy: the config is frozen
        unknown = sorted(set(self.options) - set(OPTIONS[self.method]))
        if unknown:
            raise ValueError(
                f'{unknown} are not options of {self.method!r}: its options are '
                f'{", ".join(OPTIONS[self.method]) or "none"} (steps, step_size, rtol and atol are '
                'SolverConfig fields)'
            )

    @property
    def is_adaptive(self) -> bool:
        return self.method in ADAPTIVE_METHODS

    @property
    def stepped(self) -> bool:
        """Stepped by the stack, one grid interval at a time (Runge–Kutta without the adjoint); else ``odeint``."""
        return self.method in RUNGE_KUTTA_METHODS and not self.adjoint

    @property
    def unit(self) -> str:
        """What the grid counts, for labels: 'iteration' (the recurrence) or 't' (time)."""
        return 'iteration' if self.method == 'recurrence' else 't'

    @property
    def evals_per_step(self) -> Optional[int]:
        """Field evaluations per grid step of Runge–Kutta methods (None for Adams and adaptive)."""
        return RUNGE_KUTTA_METHODS.get(self.method)

    def to_dict(self) -> Dict[str, Any]:
        """The fields that rebuild this config (``SolverConfig(**d)``, JSON-ready): the method, the steps (or the
        step_size they were given by) and t_end, and the other fields where they differ from the defaults."""
        fields = dataclasses.asdict(self)
        defaults = dataclasses.asdict(SolverConfig())
        del fields['steps' if self.step_size is not None else 'step_size']
        return {k: v for k, v in fields.items() if k in ('method', 'steps', 'step_size', 't_end') or v != defaults[k]}

    def exact_evals(self, steps: int) -> Optional[int]:
        """Field evaluations of ``steps`` grid steps when the method fixes them (Runge–Kutta), else None."""
        return None if self.evals_per_step is None else steps * self.evals_per_step

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
        elif 'steps' not in changes and self.step_size is not None:
            changes['steps'] = None  # recomputed from step_size (and the new t_end)
        elif 't_end' in changes and is_real(changes['t_end']) and changes['t_end'] > 0:
            steps = changes['t_end'] / self.h  # keep the step length
            if abs(steps - round(steps)) > 1e-6 * max(1., steps) or round(steps) < 1:
                raise ValueError(
                    f't_end={changes["t_end"]:g} is not a whole number of steps of the current '
                    f'h={self.h:g}: give a multiple of h, or steps / step_size with it'
                )
            changes['steps'] = round(steps)
        return dataclasses.replace(self, **changes)

    def truncated(self, steps: int) -> 'SolverConfig':
        """The first ``steps`` grid steps: horizon steps·h, same step length."""
        return self.replace(t_end=self.h * steps, steps=steps)

    def describe(self) -> str:
        tol = f', rtol={self.rtol:g}, atol={self.atol:g}' if self.is_adaptive else ''
        return (
            f'method={self.method!r}, steps={self.steps}, h={self.h:.4g}, t_end={self.t_end:g}{tol}, '
            f'adjoint={self.adjoint}'
        )

    def grid(self, device=None, dtype=torch.float32) -> torch.Tensor:
        """The uniform time grid t_0 = 0, …, t_steps = t_end, shape (steps + 1,)."""
        return torch.arange(self.steps + 1, device=device, dtype=torch.float64).mul_(self.h).to(dtype)


def solver_config(solver: Union[None, str, Dict[str, Any], SolverConfig], **defaults) -> SolverConfig:
    """The one spelling of solver settings, as models and :func:`odeify` take them: ``solver`` a
    :class:`SolverConfig` (taken as it is), a method name or a dict of its fields, read over ``defaults`` (fields
    too; a given ``step_size`` replaces the default ``steps``), or None (the defaults)."""
    if isinstance(solver, SolverConfig):
        return solver
    fields = {'method': solver} if isinstance(solver, str) else check_dict('solver', solver or {})
    if 'step_size' in fields:
        defaults.pop('steps', None)
    return SolverConfig(**{**defaults, **fields})


# Flat model kwargs (``solver='euler', steps=6``: ``solver`` the method, ``solver_options`` the options), as
# config.json files record them (timm's ``local-dir:`` then lets a caller's kwarg replace one setting) and train.py's
# ``--model-kwargs`` passes them. models._builder.build_continuous_depth_model, every model's create_model entry,
# folds them into ``solver`` (the one place that reads them).
FLAT_SOLVER_KWARGS = (
    'steps',
    'step_size',
    't_end',
    'rtol',
    'atol',
    'adjoint',
    'check_finite',
    'max_steps',
    'solver_options',
)


def flat_solver_kwargs(config: SolverConfig) -> Dict[str, Any]:
    """``config`` as flat model kwargs (:data:`FLAT_SOLVER_KWARGS`, ``solver`` the method), as exports record it
    (None: no such kwarg)."""
    return dict(
        solver=config.method,
        steps=None if config.step_size else config.steps,
        step_size=config.step_size,
        t_end=config.t_end,
        rtol=config.rtol,
        atol=config.atol,
        adjoint=config.adjoint,
        check_finite=config.check_finite,
        max_steps=config.to_dict().get('max_steps'),
        solver_options=dict(config.options) or None,
    )


def fold_flat_solver_kwargs(kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """``kwargs`` with the :data:`FLAT_SOLVER_KWARGS` given (not None) folded into ``solver``: under the fields of a
    dict or :class:`SolverConfig` ``solver`` (what it spells out wins, e.g. over a saved config.json's flat steps),
    with a method name ``solver`` as their method."""
    flat = {k: kwargs.pop(k) for k in FLAT_SOLVER_KWARGS if k in kwargs}
    flat = {k: v for k, v in flat.items() if v is not None}
    if 'solver_options' in flat:
        flat['options'] = check_dict('solver_options (torchdiffeq options)', flat.pop('solver_options'))
    solver = kwargs.get('solver')
    if isinstance(solver, SolverConfig) or not flat:
        return kwargs
    given = {'method': solver} if isinstance(solver, str) else dict(solver or {})
    for one, other in (('steps', 'step_size'), ('step_size', 'steps')):
        if one in given:
            flat.pop(other, None)
    kwargs['solver'] = {**flat, **given}
    return kwargs
