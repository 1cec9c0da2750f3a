"""``vit_odeified``: any timm ViT with its blocks replaced by one ODE block, as a registered model.

The registry entry lets timm's train.py (and every timm tool) build an odeified ViT by name:

    --model vit_odeified --model-kwargs base=vit_small_patch16_224 init=mean [field=odevit solver=rk4 steps=24]
    --pretrained   (loads the BASE model's pretrained weights before the conversion)

Everything else (pretrained_cfg, head, …) is the base model's; see :func:`timm_odevit.odeify`.
"""
from typing import Optional

import timm
from timm.models import generate_default_cfgs, register_model

from ..odeify import odeify

__all__ = []

default_cfgs = generate_default_cfgs({
    # input size / normalisation come from the base model's own pretrained_cfg at creation
    'vit_odeified': {'url': '', 'num_classes': 1000, 'input_size': (3, 224, 224), 'pool_size': None,
                     'crop_pct': 0.9, 'interpolation': 'bicubic', 'fixed_input_size': True,
                     'mean': (0.5, 0.5, 0.5), 'std': (0.5, 0.5, 0.5), 'first_conv': 'patch_embed.proj',
                     'classifier': 'head', 'license': 'apache-2.0', 'paper_ids': 'arXiv:2511.16501'},
})


@register_model
def vit_odeified(
        pretrained: bool = False,
        base: str = 'vit_tiny_patch16_224',
        field: str = 'state_subtracted',
        init: str = 'mean',
        solver: str = 'euler',
        steps: Optional[int] = None,
        t_end: Optional[float] = None,
        **kwargs,
):
    """timm ViT ``base`` (its pretrained weights with pretrained=True, other kwargs passed to it)
    converted by odeify(field, init) with the given solver (default Euler over the base's depth)."""
    kwargs.pop('pretrained_cfg', None)  # the base model resolves its own
    kwargs.pop('pretrained_cfg_overlay', None)
    vit = timm.create_model(base, pretrained=pretrained, **kwargs)
    config = {'method': solver}
    if steps is not None:
        config['steps'] = steps
    if t_end is not None:
        config['t_end'] = t_end
    return odeify(vit, field=field, init=init, solver=config)
