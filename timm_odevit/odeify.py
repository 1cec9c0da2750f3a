"""Plug & play: replace the L blocks of a timm Vision Transformer with one continuous-depth layer.

    import timm, timm_odevit
    vit = timm.create_model('vit_small_patch16_224', pretrained=True)
    ode_vit = timm_odevit.odeify(vit, field='state_subtracted', init='mean', solver=dict(method='euler'))

The result is a copy of the model (the original is untouched) whose ``blocks`` is an
:class:`ODEBlockStack`: one shared field integrated by an :class:`ODEBlock`. Everything else —
patch embedding, prefix tokens, position embedding, final norm, head, pretrained_cfg — is kept, so
timm's whole model API still works, and ``forward_intermediates`` yields ODE states.

Fields: ``'state_subtracted'`` (ż = B(z) − z with B a copy of a ViT block: Euler with h = 1 and
L steps is exactly applying B L times) or ``'odevit'`` (ODE-ViT's parallel CenterNorm field, with
depth scale L; its attention/MLP weights can be initialised from the block's, its norms and
biases cannot). Initialisation: ``'block:k'`` (block k), ``'mean'`` (the parameter mean of all
blocks) or ``'random'``.
"""
import copy
from typing import Any, Dict, Iterator, Optional, Union

import torch
from torch import nn
from timm.layers import register_notrace_module
from timm.models.vision_transformer import VisionTransformer, init_weights_vit_timm

from .layers import BlockField, ODEBlock, ODEViTField, SolverConfig, spectral_init_

__all__ = ['odeify', 'ODEBlockStack']
FIELDS = ('state_subtracted', 'odevit')


class _ODEStep:
    """One grid step [t_i, t_{i+1}] of an ODEBlock, callable like a ViT block (not a module)."""

    def __init__(self, stack: 'ODEBlockStack', index: int):
        self.stack, self.index = stack, index

    def __call__(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None, is_causal: bool = False):
        return self.stack(x, step=self.index, attn_mask=attn_mask, is_causal=is_causal)


@register_notrace_module
class ODEBlockStack(nn.Module):
    """Stands where a ViT's ``nn.Sequential`` of blocks stood: ``forward(x)`` integrates the whole
    horizon; ``len()``, iteration (one grid step per item) and slicing ``[:n]`` (a shorter horizon)
    give timm's forward_intermediates / prune / grad-checkpointing code what it expects."""

    def __init__(self, ode: ODEBlock):
        super().__init__()
        self.ode = ode

    def __len__(self) -> int:
        return self.ode.num_time_points

    def __iter__(self) -> Iterator[_ODEStep]:
        return iter([_ODEStep(self, i) for i in range(len(self))])

    def __getitem__(self, item) -> Union['ODEBlockStack', _ODEStep]:
        if isinstance(item, slice):
            start, stop, step = item.indices(len(self))
            if start != 0 or step != 1 or stop < 1:
                raise IndexError('an ODE stack can only be cut to its first n time points ([:n], n >= 1)')
            shorter = ODEBlockStack(ODEBlock(self.ode.field, self.ode.solver))
            shorter.ode.truncate(stop)
            return shorter
        return _ODEStep(self, range(len(self))[item])

    def forward(
            self,
            x: torch.Tensor,
            step: Optional[int] = None,
            attn_mask: Optional[torch.Tensor] = None,
            is_causal: bool = False,
    ) -> torch.Tensor:
        """Integrate the whole horizon, or with ``step`` = i advance x from t_i to t_{i+1} (one step
        of the configured solver; what iterating over the stack calls)."""
        if attn_mask is not None or is_causal:
            raise ValueError('attention masks / causal attention are not supported inside an odeified ViT')
        if step is None:
            return self.ode(x)
        cfg = self.ode.solver
        one = ODEBlock(self.ode.field, cfg.replace(t_end=cfg.h, steps=1))
        one.grad_checkpointing = self.ode.grad_checkpointing
        return one(x)


@torch.no_grad()
def _source_block(blocks: nn.Sequential, init: str) -> nn.Module:
    if init == 'random':
        block = copy.deepcopy(blocks[0])
        block.apply(init_weights_vit_timm)
        for m in block.modules():
            if isinstance(m, nn.LayerNorm):
                m.reset_parameters()
        return block
    if init == 'mean':
        block = copy.deepcopy(blocks[0])
        for name, p in block.named_parameters():
            p.copy_(torch.stack([b.get_parameter(name) for b in blocks]).mean(0))
        return block
    if init.startswith('block:'):
        try:
            k = int(init.split(':', 1)[1])
            return copy.deepcopy(blocks[k])
        except (ValueError, IndexError):
            raise ValueError(f'init {init!r}: the model has blocks 0..{len(blocks) - 1}') from None
    raise ValueError(f"Unknown init {init!r}; choose 'block:k', 'mean' or 'random'")


@torch.no_grad()
def _odevit_field_from(block: nn.Module, depth: int, init: str) -> ODEViTField:
    dim = block.norm1.normalized_shape[0]
    w = block.attn.qkv.weight
    field = ODEViTField(dim, block.attn.num_heads, mlp_ratio=block.mlp.fc1.out_features / dim,
                        depth_scale=float(depth), device=w.device, dtype=w.dtype)
    spectral_init_(field)
    if init != 'random':  # attention and MLP weights carry over; CenterNorm/bias-free parts cannot
        field.attn.qkv.weight.copy_(block.attn.qkv.weight)
        field.attn.proj.weight.copy_(block.attn.proj.weight)
        field.mlp.fc1.weight.copy_(block.mlp.fc1.weight)
        field.mlp.fc2.weight.copy_(block.mlp.fc2.weight)
    return field


def odeify(
        model: nn.Module,
        field: str = 'state_subtracted',
        init: str = 'mean',
        solver: Optional[Union[SolverConfig, Dict[str, Any]]] = None,
) -> VisionTransformer:
    """A copy of a timm ``VisionTransformer`` (vit_*, deit_* incl. distilled, register-token ViTs)
    whose L blocks are replaced by one shared ODE block.

    Args:
        model: the discrete ViT (left untouched).
        field: 'state_subtracted' or 'odevit'.
        init: 'block:k', 'mean' or 'random'.
        solver: SolverConfig or dict of its fields. Default: Euler with L steps over t ∈ [0, L]
            for 'state_subtracted' (h = 1, the discrete stack's depth), t ∈ [0, 1] for 'odevit'.
    """
    if not isinstance(model, VisionTransformer):
        raise TypeError(f'odeify needs a timm VisionTransformer (vit_*, deit_*, ...), got {type(model).__name__}')
    if field not in FIELDS:
        raise ValueError(f'Unknown field {field!r}; choose one of {FIELDS}')
    blocks = model.blocks
    if isinstance(blocks, ODEBlockStack):
        raise ValueError('this model is already odeified')
    depth = len(blocks)
    source = _source_block(blocks, init)
    if field == 'state_subtracted':
        vector_field = BlockField(source, 'state_subtracted')
        default = SolverConfig(method='euler', steps=depth, t_end=float(depth))
    else:
        vector_field = _odevit_field_from(source, depth, init)
        default = SolverConfig(method='euler', steps=depth, t_end=1.0)
    if isinstance(solver, SolverConfig):
        config = solver
    else:
        changes = dict(solver or {})
        if 'steps' in changes and 't_end' not in changes and field == 'state_subtracted':
            changes['t_end'] = default.t_end  # keep the horizon, refine the grid
        config = default.replace(**changes)
    converted = copy.deepcopy(model, memo={id(blocks): nn.Identity()})  # a copy without the L blocks
    converted.blocks = ODEBlockStack(ODEBlock(vector_field, config))
    converted.pretrained_cfg = dict(getattr(model, 'pretrained_cfg', {}))
    return converted
