"""What :func:`~.odeified.odeify` builds from a discrete timm ViT: the block its field starts from, the ODE-ViT field
rebuilt from a timm ``Block``, and the frozen parts of the kept shell."""
import copy
from typing import Optional, Sequence

import torch
from torch import nn
from timm.layers import LayerScale, get_device_dtype
from timm.models.vision_transformer import VisionTransformer, init_weights_vit_timm
from timm.utils import freeze as timm_freeze

from ..layers import ODEViTField, spectral_init_


@torch.no_grad()
def source_block(blocks: nn.Sequential, init: str) -> nn.Module:
    """A copy of the block odeify's field starts from: block k (``init='block:k'``), the parameter mean of all
    blocks ('mean'), or a block of their layout initialised timm's way ('random')."""
    block = copy.deepcopy(blocks[0])
    if init == 'random':
        block.apply(init_weights_vit_timm)  # linears timm's way, every other module reset (norms)
    elif init == 'mean':
        for name, p in block.named_parameters():
            p.copy_(torch.stack([b.get_parameter(name) for b in blocks]).mean(0))
    elif init.startswith('block:'):
        try:
            block = copy.deepcopy(blocks[int(init.split(':', 1)[1])])
        except (ValueError, IndexError):
            raise ValueError(f'init {init!r}: the model has blocks 0..{len(blocks) - 1}') from None
    else:
        raise ValueError(f"Unknown init {init!r}; choose 'block:k', 'mean' or 'random'")
    return block


def _scaled(weight: torch.Tensor, scale: Optional[nn.Module]) -> torch.Tensor:
    """``weight`` with the gamma of a timm LayerScale ``scale`` (deit3 and other ViTs with init_values) folded in:
    γ ⊙ W x = (diag γ W) x."""
    return scale.gamma[:, None] * weight if isinstance(scale, LayerScale) else weight


@torch.no_grad()
def odevit_field_from(block: nn.Module, depth: int, init: str) -> ODEViTField:
    """The ODE-ViT field from a timm ``Block``'s attention and MLP; LayerScale gammas are folded
    into the output projections (γ ⊙ W x = (diag γ W) x)."""
    layout = ('norm1', 'attn.qkv', 'attn.proj', 'mlp.fc1', 'mlp.fc2')
    modules = dict(block.named_modules())
    missing = [n for n in layout if not isinstance(modules.get(n), (nn.Linear, nn.LayerNorm))]
    if missing:  # e.g. timm's parallel blocks, or a wrapped projection whose .weight is not what it computes
        raise ValueError(
            f"field='odevit' rebuilds the ODE-ViT field from a timm Block, but {type(block).__name__} "
            f"lacks {missing}: use field='state_subtracted', which wraps any block"
        )
    dim = block.norm1.normalized_shape[0]
    field = ODEViTField(dim, block.attn.num_heads, mlp_ratio=block.mlp.fc1.out_features / dim,
                        depth_scale=float(depth), **get_device_dtype(block))
    spectral_init_(field)
    if init != 'random':  # attention and MLP weights carry over; CenterNorm/bias-free parts cannot
        field.attn.qkv.weight.copy_(block.attn.qkv.weight)
        field.attn.proj.weight.copy_(_scaled(block.attn.proj.weight, getattr(block, 'ls1', None)))
        field.mlp.fc1.weight.copy_(block.mlp.fc1.weight)
        field.mlp.fc2.weight.copy_(_scaled(block.mlp.fc2.weight, getattr(block, 'ls2', None)))
    return field


def freeze_parts(model: VisionTransformer, names: Sequence[str]) -> None:
    """Fix the weights of the named parts of ``model`` (modules through timm's ``freeze``, or parameters)."""
    modules = dict(model.named_modules())
    params = dict(model.named_parameters())
    unknown = [n for n in names if n not in params and (n not in modules or n in ('', 'blocks'))]
    if unknown:
        raise ValueError(
            f'freeze {unknown}: not a part of the kept shell; choose among patch_embed, cls_token, '
            'pos_embed, norm, head (or another module or parameter outside blocks)'
        )
    for name in names:
        if name in params:
            params[name].requires_grad_(False)
        else:
            timm_freeze(model, [name])
