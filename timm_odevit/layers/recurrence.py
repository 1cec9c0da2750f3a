"""Recurrence: the depth of a recurrent block, z_k = B(z_{k−1}), in the shape of a solver config."""
import dataclasses
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch.utils.checkpoint import checkpoint

from .._checks import is_int
from .solver import assert_finite, checks_enabled


@dataclass(frozen=True)
class Recurrence:
    """Plain recurrence z_k = B(z_{k−1}), k = 1..iterations (not an ODE: no solver, no step length).

    It offers the part of :class:`SolverConfig`'s interface a :class:`ContinuousDepthStack` uses,
    with time = iteration count: grid 0, 1, …, iterations, h = 1, one block evaluation per step.
    """
    iterations: int = 12
    check_finite: bool = True

    def __post_init__(self):
        if not is_int(self.iterations) or self.iterations < 1:
            raise ValueError(f'iterations must be an integer >= 1, got {self.iterations!r}')
        object.__setattr__(self, 'iterations', int(self.iterations))
        if not isinstance(self.check_finite, bool):
            raise TypeError(f'check_finite must be True or False, got {self.check_finite!r}')

    method = 'recurrence'
    adjoint = False
    is_adaptive = False
    h = 1.0

    @property
    def steps(self) -> int:
        return self.iterations

    @property
    def t_end(self) -> float:
        return float(self.iterations)

    def exact_evals(self, steps: int) -> int:
        return steps

    def replace(self, **changes) -> 'Recurrence':
        return dataclasses.replace(self, **changes)

    def truncated(self, steps: int) -> 'Recurrence':
        return self.replace(iterations=steps)

    def grid(self, device=None, dtype=torch.float32) -> torch.Tensor:
        """Iteration numbers 0, 1, …, iterations, shape (iterations + 1,)."""
        return torch.arange(self.iterations + 1, device=device, dtype=dtype)

    def describe(self) -> str:
        return f'recurrence, iterations={self.iterations}'


def iterate(
        block: Callable[[torch.Tensor], torch.Tensor],
        z: torch.Tensor,
        config: Recurrence,
        indices: Sequence[int],
        start: int = 0,
        grad_checkpointing: bool = False,
) -> torch.Tensor:
    """Apply ``block`` from z = z_start and return the iterates z_k for k in ``indices``
    (increasing, in start+1..iterations), shape (len(indices), *z.shape)."""
    if (not indices or any(b <= a for a, b in zip(indices, indices[1:])) or indices[0] <= start
            or indices[-1] > config.iterations):
        raise ValueError(f'indices must increase within {start + 1}..{config.iterations}, got {list(indices)}')
    wanted, states = set(indices), []
    for k in range(start + 1, indices[-1] + 1):
        z = checkpoint(block, z, use_reentrant=False) if grad_checkpointing and torch.is_grad_enabled() else block(z)
        if k in wanted:
            states.append(z)
    if config.check_finite and checks_enabled():
        assert_finite(z, f'iterating the recurrent block {indices[-1] - start} times')
    return torch.stack(states)
