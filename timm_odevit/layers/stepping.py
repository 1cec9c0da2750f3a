"""How a grid is stepped: Runge–Kutta steps from Butcher tables, and torchdiffeq's ``odeint`` for the rest.

The tables are those of torchdiffeq's methods of the same names (its ``rk4`` is the 3/8 rule); ``'recurrence'`` is
Euler's (with h = 1, :class:`SolverConfig` pins it). Multistep (Adams) and adaptive methods, and every method with the
adjoint, run through :func:`odeint_grid`, one call to all grid points, so their history and step size carry over
between grid points.
"""
from typing import Callable, Sequence

import torch
from torchdiffeq import odeint, odeint_adjoint

from .._compat import ODE_SOLVE_FAILURES
from .solver import TABLEAUS, SolverConfig


def rk_step(f: Callable, t: float, h: float, x: torch.Tensor, method: str) -> torch.Tensor:
    """One step x(t) -> x(t + h) of the Runge–Kutta ``method`` on dx/dt = f(t, x) (t a float)."""
    c, a, b = TABLEAUS[method]
    k = []
    for c_i, a_i in zip(c, a):
        k.append(f(t + c_i * h, x if not a_i else x + h * _weighted(a_i, k)))
    return x + h * _weighted(b, k)


def _weighted(weights: Sequence[float], k: Sequence[torch.Tensor]) -> torch.Tensor:
    terms = [w * k_j if w != 1. else k_j for w, k_j in zip(weights, k) if w]
    return sum(terms[1:], terms[0])


def odeint_grid(
        f: Callable,
        x: torch.Tensor,
        t: torch.Tensor,
        config: SolverConfig,
        params: Sequence[torch.Tensor] = (),
        end_only: bool = False,
) -> torch.Tensor:
    """States at t[1:] from x at t[0] (a slice of the config's grid), one torchdiffeq ``odeint`` call (shape
    (len(t) - 1, *x.shape)); fixed-grid methods step from one grid point to the next. ``end_only`` (fixed-grid
    methods): the same steps, only X(t[-1]) returned (shape (1, *x.shape)), so that the adjoint keeps 2 states
    for its backward pass instead of len(t)."""
    # no values (the step-size control would divide by a zero-size norm)
    if x.numel() == 0 or x.is_meta:
        return (x + 0 * f(t[0], x)).expand(len(t) - 1, *x.shape)
    eps = torch.finfo(x.dtype).eps
    half = x.dtype in (torch.float16, torch.bfloat16)
    if config.is_adaptive and half and min(config.rtol, config.atol) < eps:
        raise ValueError(
            f'the adaptive {config.method!r} cannot meet rtol={config.rtol:g}, atol={config.atol:g} in '
            f'{x.dtype} (its precision {eps:.2g}): use larger tolerances or float32'
        )
    options = dict(config.options)
    if end_only:
        # the grid's fractions of [t0, t1]: the adjoint's backward solve asks for (-t1, -t0)
        frac = (t - t[0]) / (t[-1] - t[0])
        options['grid_constructor'] = lambda func, y0, ends: ends[0] + (ends[-1] - ends[0]) * frac
        t = t[[0, -1]]
    kwargs = dict(
        method='euler' if config.method == 'recurrence' else config.method,
        options=options,
        rtol=config.rtol,
        atol=config.atol,
    )
    try:
        if config.adjoint:
            return odeint_adjoint(f, x, t, adjoint_params=tuple(params), **kwargs)[1:]
        return odeint(f, x, t, **kwargs)[1:]
    except ODE_SOLVE_FAILURES as e:  # a failed adaptive solve ('underflow in dt nan')
        raise FloatingPointError(f'ODE solver failed ({config.describe()}): {e}') from e
