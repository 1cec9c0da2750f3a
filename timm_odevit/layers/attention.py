"""Attention for the ODE-ViT vector field: bias-free softmax attention and tied L2 attention."""
import math
import torch
import torch.nn.functional as F
from torch import nn
from timm.layers import use_fused_attn

ATTN_TYPES = ('softmax', 'l2')


class ODEAttention(nn.Module):
    """Multi-head self-attention on tokens (B, N, D) -> (B, N, D), bias-free by default.

    attn_type:
      * ``'softmax'``: softmax(q kᵀ / √d_h) v with a fused qkv projection (the reference's choice).
      * ``'l2'``: P_ij ∝ exp(−‖q_i − k_j‖² / √d_h) with tied weights W_Q = W_K (Kim et al. 2021,
        "The Lipschitz constant of self-attention": dot-product attention is not Lipschitz, L2
        attention with tied query/key is). The value projection is separate.

    :meth:`attention_probs` returns the probabilities (B, H, N, N) for analysis and regularisers.
    """

    def __init__(
            self,
            dim: int,
            num_heads: int = 8,
            attn_type: str = 'softmax',
            qkv_bias: bool = False,
            proj_bias: bool = False,
            attn_drop: float = 0.,
            proj_drop: float = 0.,
            device=None,
            dtype=None,
    ):
        super().__init__()
        if attn_type not in ATTN_TYPES:
            raise ValueError(f'Unknown attn_type {attn_type!r}; choose one of {ATTN_TYPES}')
        if dim % num_heads:
            raise ValueError(f'dim ({dim}) must be divisible by num_heads ({num_heads})')
        dd = {'device': device, 'dtype': dtype}
        self.attn_type = attn_type
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.fused_attn = use_fused_attn()
        if attn_type == 'softmax':
            self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias, **dd)
        else:
            self.qk = nn.Linear(dim, dim, bias=qkv_bias, **dd)  # tied W_Q = W_K
            self.v = nn.Linear(dim, dim, bias=qkv_bias, **dd)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim, bias=proj_bias, **dd)
        self.proj_drop = nn.Dropout(proj_drop)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        B, N, _ = x.shape
        return x.reshape(B, N, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, N, d_h)

    def attention_probs(self, x: torch.Tensor) -> torch.Tensor:
        """Attention probabilities (B, H, N, N) on tokens x (differentiable, explicit path)."""
        if self.attn_type == 'softmax':
            B, N, _ = x.shape
            q, k, _ = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
            return ((q @ k.transpose(-2, -1)) * self.head_dim ** -0.5).softmax(-1)
        q = self._heads(self.qk(x))
        logits = (q @ q.transpose(-2, -1)) * (2. / math.sqrt(self.head_dim))
        return (logits - q.pow(2).sum(-1).unsqueeze(-2) / math.sqrt(self.head_dim)).softmax(-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, D = x.shape
        if self.attn_type == 'softmax':
            q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
            scale = self.head_dim ** -0.5
            bias = None
        else:
            q = k = self._heads(self.qk(x))
            v = self._heads(self.v(x))
            # −‖q_i − k_j‖² = 2 q_i·k_j − ‖k_j‖² − ‖q_i‖²; the last term is constant over j and cancels.
            scale = 2. / math.sqrt(self.head_dim)
            bias = -k.pow(2).sum(-1).unsqueeze(-2) / math.sqrt(self.head_dim)  # (B, H, 1, N)

        if self.fused_attn:
            x = F.scaled_dot_product_attention(
                q, k, v, attn_mask=bias, dropout_p=self.attn_drop.p if self.training else 0., scale=scale)
        else:
            attn = (q @ k.transpose(-2, -1)) * scale
            if bias is not None:
                attn = attn + bias
            x = self.attn_drop(attn.softmax(dim=-1)) @ v
        x = x.transpose(1, 2).reshape(B, N, D)
        return self.proj_drop(self.proj(x))


def attention_probs(attn: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Attention probabilities (B, H, N, N) of an :class:`ODEAttention` or a timm ``Attention``
    (fused qkv, optional q/k norms) on its input x (B, N, D); differentiable."""
    if isinstance(attn, ODEAttention):
        return attn.attention_probs(x)
    B, N, C = x.shape
    qkv = attn.qkv(x).reshape(B, N, 3, attn.num_heads, C // attn.num_heads).permute(2, 0, 3, 1, 4)
    q, k = attn.q_norm(qkv[0]), attn.k_norm(qkv[1])
    return ((q * attn.scale) @ k.transpose(-2, -1)).softmax(-1)
