"""RecurrentBlock: a block applied T times, z_t = B(z_{t−1}), with the ODEBlock interface."""
from typing import List

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from timm.layers import register_notrace_module

from .block_fields import BlockField
from .solver import assert_finite


@register_notrace_module
class RecurrentBlock(nn.Module):
    """Plain recurrence over tokens (B, N, D): z_t = B(z_{t−1}), t = 1..iterations.

    Holds a :class:`BlockField` (only its ``block`` is used), so parameter names match an
    :class:`ODEBlock` over the same field and weights move freely between regimes. Time point i
    is iterate z_{i+1}; ``nfe`` counts block applications of the last forward.
    """

    def __init__(self, field: BlockField, iterations: int = 12, check_finite: bool = True):
        super().__init__()
        self.field = field
        self.iterations = _check_iterations(iterations)
        self.check_finite = check_finite
        self.grad_checkpointing = False
        self.nfe = 0

    @property
    def num_time_points(self) -> int:
        return self.iterations

    def set_iterations(self, iterations: int) -> None:
        self.iterations = _check_iterations(iterations)

    def truncate(self, num_points: int) -> None:
        self.set_iterations(num_points)

    def trajectory(self, z: torch.Tensor, indices: List[int]) -> torch.Tensor:
        """Iterates at 0-based indices (increasing; index i is z_{i+1}), shape (len(indices), B, N, D)."""
        if not indices or indices[0] < 0 or any(b <= a for a, b in zip(indices, indices[1:])):
            raise ValueError(f'indices must increase from 0, got {list(indices)}')
        block, wanted, states = self.field.block, set(indices), []
        for i in range(indices[-1] + 1):
            if self.grad_checkpointing and torch.is_grad_enabled():
                z = checkpoint(block, z, use_reentrant=False)
            else:
                z = block(z)
            if i in wanted:
                states.append(z)
        self.nfe = indices[-1] + 1
        if self.check_finite:
            assert_finite(z, f'iterating the recurrent block {self.nfe} times')
        return torch.stack(states)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.trajectory(z, [self.iterations - 1])[-1]

    def extra_repr(self) -> str:
        return f'iterations={self.iterations}'


def _check_iterations(iterations) -> int:
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f'iterations must be an integer >= 1, got {iterations!r}')
    return iterations
