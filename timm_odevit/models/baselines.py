"""Discrete timm ViTs matched to the continuous-depth models, the baselines they are compared with.

Each is a plain timm ``VisionTransformer`` (pre-norm blocks with LayerNorm and qkv bias, final LayerNorm), named by
what it is matched to. Beside each bViT (its tokens, patch size and heads):

    vit_<size>_flops_matched       T = 12 independent blocks of the same width: the bViT's FLOPs
    vit_<size>_params_matched      4 blocks at half the width: 4·12·(D/2)² = 12·D² block parameters, one bViT block's

Beside ODE-ViT (its tokens, [CLS] + 10 registers + patches, patch size, MLP ratio and head count):

    vit_odevit_tiny_cifar_params_matched   4 blocks at half the width (D 128): ODE-ViT's one field
                                           is 8·D² weights, 4 blocks of (D/2) hold 4·8·(D/2)² = 8·D²;
                                           parameters within ±5 % of odevit_tiny_cifar (tested)
    vit_odevit_tiny_cifar_flops_matched    6 independent blocks of the same width (D 256): the FLOPs
                                           of odevit_tiny_cifar at its trained grid, 6 Euler steps
                                           (tested), with ~6× the parameters
"""
import functools
from typing import Any, Dict

from timm.models import generate_default_cfgs, register_model
from timm.models.vision_transformer import VisionTransformer

from ._builder import build_continuous_depth_model
from ._cfgs import CIFAR100_CFG, IMAGENET_CFG, cifar_cfg
from .bvit import BASE, SMALL, TINY

__all__ = []


_cfg = functools.partial(cifar_cfg, paper_ids='arXiv:2608.04879')


default_cfgs = generate_default_cfgs(
    {
        'vit_tiny_cifar_flops_matched': _cfg(),
        'vit_tiny_cifar_params_matched': _cfg(),
        'vit_small_cifar_flops_matched': _cfg(**CIFAR100_CFG),
        'vit_small_cifar_params_matched': _cfg(**CIFAR100_CFG),
        'vit_base_patch16_224_flops_matched': _cfg(**IMAGENET_CFG),
        'vit_base_patch16_224_params_matched': _cfg(**IMAGENET_CFG),
        'vit_odevit_tiny_cifar_params_matched': _cfg(paper_ids='arXiv:2511.16501'),
        'vit_odevit_tiny_cifar_flops_matched': _cfg(paper_ids='arXiv:2511.16501'),
    }
)

# odevit_tiny_cifar's size and tokens; its trained grid is 6 Euler steps (one field evaluation each)
_ODEVIT_TINY = dict(
    img_size=32, patch_size=4, embed_dim=256, num_heads=4, mlp_ratio=2.0, reg_tokens=10
)
ODEVIT_TINY_TRAINED_STEPS = 6


# built as the continuous-depth models are: timm's getter features, the checkpoint filter, a data cfg of the size
# the model was built for
_create_baseline = functools.partial(build_continuous_depth_model, VisionTransformer)


def _params_matched(size: Dict[str, Any]) -> Dict[str, Any]:
    """4 blocks at half the width: 4·12·(D/2)² = 12·D², one bViT block's parameters."""
    return dict(
        size, embed_dim=size['embed_dim'] // 2, num_heads=max(size['num_heads'] // 2, 3), depth=4
    )


@register_model
def vit_tiny_cifar_flops_matched(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """Discrete ViT with the FLOPs of bvit_tiny_cifar: 12 independent D 192 blocks."""
    return _create_baseline(
        'vit_tiny_cifar_flops_matched', pretrained, **dict(TINY, depth=12, **kwargs)
    )


@register_model
def vit_tiny_cifar_params_matched(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """Discrete ViT with the block parameters of bvit_tiny_cifar: 4 blocks of D 96."""
    return _create_baseline(
        'vit_tiny_cifar_params_matched', pretrained, **dict(_params_matched(TINY), **kwargs)
    )


@register_model
def vit_small_cifar_flops_matched(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """Discrete ViT with the FLOPs of bvit_small_cifar: 12 independent D 384 blocks."""
    return _create_baseline(
        'vit_small_cifar_flops_matched', pretrained, **dict(SMALL, depth=12, **kwargs)
    )


@register_model
def vit_small_cifar_params_matched(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """Discrete ViT with the block parameters of bvit_small_cifar: 4 blocks of D 192."""
    return _create_baseline(
        'vit_small_cifar_params_matched', pretrained, **dict(_params_matched(SMALL), **kwargs)
    )


@register_model
def vit_base_patch16_224_flops_matched(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """Discrete ViT with the FLOPs of bvit_base_patch16_224: 12 independent D 768 blocks."""
    return _create_baseline(
        'vit_base_patch16_224_flops_matched', pretrained, **dict(BASE, depth=12, **kwargs)
    )


@register_model
def vit_base_patch16_224_params_matched(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """Discrete ViT with the block parameters of bvit_base_patch16_224: 4 blocks of D 384."""
    return _create_baseline(
        'vit_base_patch16_224_params_matched', pretrained, **dict(_params_matched(BASE), **kwargs))


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
