"""Discrete timm ViTs matched to the ODE-ViT models, the baselines ODE-ViT is compared with.

Each is a plain timm ``VisionTransformer`` (pre-norm blocks with LayerNorm and qkv bias, final
LayerNorm) with ODE-ViT's tokens ([CLS] + 10 registers + patches), patch size, MLP ratio and head
count, named by what it is matched to (the bViT baselines live beside bViT in ``bvit.py``):

    vit_odevit_tiny_cifar_params_matched   4 blocks at half the width (D 128): ODE-ViT's one field
                                           is 8·D² weights, 4 blocks of (D/2) hold 4·8·(D/2)² = 8·D²;
                                           parameters within ±5 % of odevit_tiny_cifar (tested)
    vit_odevit_tiny_cifar_flops_matched    6 independent blocks of the same width (D 256): the FLOPs
                                           of odevit_tiny_cifar at its trained grid, 6 Euler steps
                                           (tested), with ~6× the parameters
"""
from typing import Any, Dict

from timm.models import generate_default_cfgs, register_model
from timm.models.vision_transformer import VisionTransformer

from ._cfgs import cifar_cfg
from .bvit import _create_baseline

__all__ = []


def _cfg(url: str = '', **kwargs) -> Dict[str, Any]:
    return cifar_cfg(url, paper_ids='arXiv:2511.16501', **kwargs)


default_cfgs = generate_default_cfgs({
    'vit_odevit_tiny_cifar_params_matched': _cfg(),
    'vit_odevit_tiny_cifar_flops_matched': _cfg(),
})

# odevit_tiny_cifar's size and tokens; its trained grid is 6 Euler steps (one field evaluation each)
_ODEVIT_TINY = dict(
    img_size=32, patch_size=4, embed_dim=256, num_heads=4, mlp_ratio=2.0, reg_tokens=10
)
ODEVIT_TINY_TRAINED_STEPS = 6


@register_model
def vit_odevit_tiny_cifar_params_matched(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """Discrete ViT with the parameters of odevit_tiny_cifar: 4 blocks of D 128, 4 heads, MLP ×2, 10 registers."""
    model_args = dict(_ODEVIT_TINY, embed_dim=_ODEVIT_TINY['embed_dim'] // 2, depth=4)
    return _create_baseline(
        'vit_odevit_tiny_cifar_params_matched', pretrained, **dict(model_args, **kwargs)
    )


@register_model
def vit_odevit_tiny_cifar_flops_matched(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """Discrete ViT with the FLOPs of odevit_tiny_cifar at 6 Euler steps: 6 blocks of D 256, 4 heads, MLP ×2."""
    model_args = dict(_ODEVIT_TINY, depth=ODEVIT_TINY_TRAINED_STEPS)
    return _create_baseline(
        'vit_odevit_tiny_cifar_flops_matched', pretrained, **dict(model_args, **kwargs)
    )
