"""The ODE-ViT vector field ψ: one shared parallel attention + MLP block."""
import math

import torch
from torch import nn
from timm.layers import DropPath, Mlp

from .._checks import check_number
from .attention import ODEAttention
from .center_norm import CenterNorm

_NORMS = {'center': CenterNorm, 'layer': nn.LayerNorm}
FIELD_NORMS = tuple(_NORMS)


class TimeEmbedding(nn.Module):
    """e(t) = W · [sin(2πkt/T), cos(2πkt/T)]_{k=1..F}: a learned time code for non-autonomous fields.

    W starts at zero, so a time-conditioned field starts out identical to the autonomous one.
    """

    def __init__(
        self, dim: int, num_frequencies: int = 8, period: float = 1.0, device=None, dtype=None
    ):
        super().__init__()
        self.num_frequencies = num_frequencies
        self.period = period
        # computed, not saved
        self.register_buffer('freqs', self._frequencies(device), persistent=False)
        self.proj = nn.Linear(2 * num_frequencies, dim, bias=False, device=device, dtype=dtype)
        nn.init.zeros_(self.proj.weight)

    def _frequencies(self, device=None) -> torch.Tensor:
        return (
            2
            * math.pi
            * torch.arange(1, self.num_frequencies + 1, device=device, dtype=torch.float32)
            / self.period
        )

    def init_non_persistent_buffers(self) -> None:
        """Recompute ``freqs`` (float32, on the weights' device): timm's hook for computed buffers
        (``timm.models._manipulate.reinit_non_persistent_buffers``), e.g. after ``to_empty`` or ``half()``."""
        self.freqs = self._frequencies(self.proj.weight.device)

    def reset_parameters(self) -> None:
        """The initial state: W = 0, ``freqs`` recomputed (a meta-device build moved with ``to_empty``)."""
        self.init_non_persistent_buffers()
        nn.init.zeros_(self.proj.weight)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        angles = t.to(self.freqs) * self.freqs  # (F,)
        return self.proj(torch.cat([angles.sin(), angles.cos()]).to(self.proj.weight.dtype))  # (D,)


class ODEViTField(nn.Module):
    """ψ(t, X) = s · ( Attn(CN_a(X)) + MLP(CN_m(X)) ),  X: (B, N, D) -> (B, N, D).

    The parallel pre-norm block of ODE-ViT (arXiv 2511.16501): attention and MLP read the same
    state, each behind its own CenterNorm, no biases; ``depth_scale`` s is the emulated depth
    (integrating over t ∈ [0, 1] with scale s is the same as t ∈ [0, s] unscaled). With
    ``time_conditioned`` the field sees X + e(t) (non-autonomous); the default is autonomous.

    ``norm='layer'`` puts LayerNorm in place of CenterNorm. CenterNorm (the paper's choice) keeps ψ
    Lipschitz but not scale-invariant: when the state grows along t, the attention logits grow with
    its square and the softmax saturates; LayerNorm bounds the field's input (README, "Measured
    results"; bench/odevit_stability.py).
    """

    def __init__(
            self,
            dim: int,
            num_heads: int,
            mlp_ratio: float = 2.,
            depth_scale: float = 12.,
            attn_type: str = 'softmax',
            bias: bool = False,
            attn_drop: float = 0.,
            proj_drop: float = 0.,
            drop_path: float = 0.,
            time_conditioned: bool = False,
            norm: str = 'center',
            act_layer=nn.GELU,
            device=None,
            dtype=None,
    ):
        super().__init__()
        dd = {'device': device, 'dtype': dtype}
        if norm not in _NORMS:
            raise ValueError(f'Unknown field norm {norm!r}: choose one of {FIELD_NORMS}')
        self.depth_scale = check_number('depth_scale', depth_scale, positive=True)
        self.time_embed = TimeEmbedding(dim, **dd) if time_conditioned else None
        self.norm_attn = _NORMS[norm](dim, **dd)
        self.attn = ODEAttention(
            dim, num_heads, attn_type=attn_type, qkv_bias=bias, proj_bias=bias,
            attn_drop=attn_drop, proj_drop=proj_drop, **dd)
        self.norm_mlp = _NORMS[norm](dim, **dd)
        self.mlp = Mlp(
            dim, int(dim * mlp_ratio), act_layer=act_layer, bias=bias, drop=proj_drop, **dd
        )
        self.drop_path = DropPath(drop_path) if drop_path > 0. else nn.Identity()

    def attention_probs(self, x: torch.Tensor) -> torch.Tensor:
        """Attention probabilities (B, H, N, N) the field applies at state x (B, N, D)."""
        return self.attn.attention_probs(self.norm_attn(x))

    def forward(self, t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        if self.time_embed is not None:
            x = x + self.time_embed(t)
        update = self.drop_path(self.attn(self.norm_attn(x))) + self.drop_path(
            self.mlp(self.norm_mlp(x))
        )
        return self.depth_scale * update
