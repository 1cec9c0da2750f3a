"""Vector fields built from a discrete residual block B (for recurrent ViTs and odeify)."""
import torch
from torch import nn

from .attention import attention_probs

FIELD_TYPES = ('state_subtracted', 'naive')


class BlockField(nn.Module):
    """ODE field from a residual block B(z) = z + Δ(z), (B, N, D) -> (B, N, D).

    * ``'state_subtracted'``: ż = B(z) − z = Δ(z). Euler with h = 1 gives z + Δ(z) = B(z), i.e.
      exactly the recurrence z_t = B(z_{t−1}): the continuous-time analogue of the block.
    * ``'naive'``: ż = B(z), the block wrapped as a black-box field. Its Euler step is
      z + h·B(z) = (1 + h)·z + h·Δ(z): a second copy of z on the skip path.
    """

    def __init__(self, block: nn.Module, field_type: str = 'state_subtracted'):
        super().__init__()
        if field_type not in FIELD_TYPES:
            raise ValueError(f'Unknown field {field_type!r}; choose one of {FIELD_TYPES}')
        self.block = block
        self.field_type = field_type

    def forward(self, t: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        out = self.block(z)
        return out - z if self.field_type == 'state_subtracted' else out

    def attention_probs(self, z: torch.Tensor) -> torch.Tensor:
        """Attention probabilities (B, H, N, N) the block applies at state z (B, N, D)."""
        return attention_probs(self.block.attn, self.block.norm1(z))

    def extra_repr(self) -> str:
        return f'field_type={self.field_type!r}'
