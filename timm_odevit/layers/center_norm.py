"""CenterNorm (LipsFormer): LayerNorm without the division by the standard deviation."""
import torch
from torch import nn


class CenterNorm(nn.Module):
    """CN(x) = γ ⊙ (D / (D − 1)) · (x − mean(x)) + β over the last dimension of size D.

    Unlike LayerNorm it does not divide by the variance, so it is Lipschitz on all of R^D
    (constant D/(D−1)·max|γ|), which keeps the ODE field ψ well-posed.
    """

    def __init__(self, dim: int, affine: bool = True, device=None, dtype=None):
        super().__init__()
        if dim < 2:
            raise ValueError(f'CenterNorm needs dim >= 2, got {dim}')
        dd = {'device': device, 'dtype': dtype}
        self.dim = dim
        self.scale = dim / (dim - 1)
        self.weight = nn.Parameter(torch.ones(dim, **dd)) if affine else None
        self.bias = nn.Parameter(torch.zeros(dim, **dd)) if affine else None

    def reset_parameters(self) -> None:
        if self.weight is not None:
            nn.init.ones_(self.weight)
            nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.scale * (x - x.mean(dim=-1, keepdim=True))
        return x if self.weight is None else x * self.weight + self.bias

    def extra_repr(self) -> str:
        return f'{self.dim}, affine={self.weight is not None}'
