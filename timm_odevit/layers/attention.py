"""Attention for the ODE-ViT vector field: timm's softmax attention (bias-free by default) and tied L2 attention."""
import contextlib
import math

import torch
import torch.nn.functional as F
from torch import nn
from timm.layers import Attention

ATTN_TYPES = ('softmax', 'l2')


class ODEAttention(Attention):
    """Multi-head self-attention on tokens (B, N, D) -> (B, N, D), bias-free by default.

    attn_type:
      * ``'softmax'``: timm's ``Attention``, softmax(q kᵀ / √d_h) v with a fused qkv projection (the reference's).
      * ``'l2'``: P_ij ∝ exp(−‖q_i − k_j‖² / √d_h) with tied weights W_Q = W_K (``qk``) and a separate ``v``
        (Kim et al. 2021, "The Lipschitz constant of self-attention": dot-product attention is not Lipschitz, L2
        attention with tied query/key is).

    :meth:`attention_probs` returns the probabilities (B, H, N, N) for analysis and regularisers.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int = 8,
        attn_type: str = 'softmax',
        qkv_bias: bool = False,
        proj_bias: bool = False,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        device=None,
        dtype=None,
    ):
        if attn_type not in ATTN_TYPES:
            raise ValueError(f'Unknown attn_type {attn_type!r}: choose one of {ATTN_TYPES}')
        super().__init__(
            dim,
            num_heads,
            qkv_bias=qkv_bias,
            proj_bias=proj_bias,
            attn_drop=attn_drop,
            proj_drop=proj_drop,
            device=device,
            dtype=dtype,
        )
        self.attn_type = attn_type
        if attn_type == 'l2':
            del self.qkv
            # tied W_Q = W_K
            self.qk = nn.Linear(dim, dim, bias=qkv_bias, device=device, dtype=dtype)
            self.v = nn.Linear(dim, dim, bias=qkv_bias, device=device, dtype=dtype)

    def _l2_logits(self, x: torch.Tensor):
        """q (= k), v (B, H, N, d_h), the logit scale and the key bias:
        −‖q_i − k_j‖² = 2 q_i·k_j − ‖k_j‖² − ‖q_i‖², whose last term is constant over j and cancels in the softmax."""
        B, N, _ = x.shape
        q, v = (
            p(x).reshape(B, N, self.num_heads, self.head_dim).transpose(1, 2)
            for p in (self.qk, self.v)
        )
        return (
            q,
            v,
            2.0 / math.sqrt(self.head_dim),
            -q.pow(2).sum(-1).unsqueeze(-2) / math.sqrt(self.head_dim),
        )

    def attention_probs(self, x: torch.Tensor) -> torch.Tensor:
        """Attention probabilities (B, H, N, N) on tokens x (differentiable, explicit path)."""
        return attention_probs(self, x)

    def forward(self, x: torch.Tensor, attn_mask=None, is_causal: bool = False) -> torch.Tensor:
        if self.attn_type == 'softmax':
            return super().forward(x, attn_mask=attn_mask, is_causal=is_causal)
        q, v, scale, bias = self._l2_logits(x)
        if self.fused_attn:
            x = F.scaled_dot_product_attention(
                q,
                q,
                v,
                attn_mask=bias,
                dropout_p=self.attn_drop.p if self.training else 0.0,
                scale=scale,
            )
        else:
            x = self.attn_drop((q @ q.transpose(-2, -1) * scale + bias).softmax(dim=-1)) @ v
        return self.proj_drop(self.proj(x.transpose(1, 2).flatten(2)))


def attention_probs(attn: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Attention probabilities (B, H, N, N) of an :class:`ODEAttention` or a timm ``Attention``
    (fused qkv, optional q/k norms) on its input x (B, N, D); differentiable."""
    if getattr(attn, 'attn_type', 'softmax') == 'l2':
        q, _, scale, bias = attn._l2_logits(x)
        return (q @ q.transpose(-2, -1) * scale + bias).softmax(-1)
    B, N, _ = x.shape
    qkv = attn.qkv(x).reshape(B, N, 3, attn.num_heads, -1).permute(2, 0, 3, 1, 4)
    q = attn.q_norm(qkv[0])
    k = attn.k_norm(qkv[1])
    return ((q * attn.scale) @ k.transpose(-2, -1)).softmax(-1)


@contextlib.contextmanager
def explicit_attention(model: nn.Module):
    """Use the explicit (non-fused) attention path of every attention module in ``model`` (forward-mode AD (JVP)
    supports it; attention hooks see its softmax)."""
    saved = {m: m.fused_attn for m in model.modules() if hasattr(m, 'fused_attn')}
    for m in saved:
        m.fused_attn = False
    try:
        yield model
    finally:
        for m, v in saved.items():
            m.fused_attn = v
