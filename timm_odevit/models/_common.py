"""Shared pieces of the model families: input checks, dataset statistics, token pooling."""
from typing import Dict, Tuple

import torch
from timm.layers import register_notrace_function

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
CIFAR100_MEAN = (0.5071, 0.4865, 0.4409)
CIFAR100_STD = (0.2673, 0.2564, 0.2762)


def cifar_cfg(url: str = '', **kwargs) -> Dict:
    """timm pretrained cfg for a 32 px CIFAR-10 model (override num_classes / mean / std / input_size)."""
    return {
        'url': url,
        'num_classes': 10,
        'input_size': (3, 32, 32),
        'pool_size': None,
        'crop_pct': 1.0,
        'interpolation': 'bicubic',
        'fixed_input_size': True,
        'mean': CIFAR10_MEAN,
        'std': CIFAR10_STD,
        'first_conv': 'patch_embed.proj',
        'classifier': 'head',
        'license': 'apache-2.0',
        **kwargs,
    }


@register_notrace_function
def check_image_input(
        x: torch.Tensor,
        in_chans: int,
        img_size: Tuple[int, int],
        patch_size: Tuple[int, int],
        dynamic_img_size: bool,
) -> None:
    """Raise ValueError for an input the model cannot take, naming what is wrong."""
    if x.ndim != 4:
        raise ValueError(f'expected an image batch (B, C, H, W), got a tensor of shape {tuple(x.shape)}')
    if x.shape[1] != in_chans:
        raise ValueError(f'model takes {in_chans} input channels, got {x.shape[1]} (input shape {tuple(x.shape)})')
    H, W = x.shape[-2:]
    if dynamic_img_size:
        if H % patch_size[0] or W % patch_size[1]:
            raise ValueError(f'image size {H}x{W} is not divisible by the patch size {patch_size[0]}x{patch_size[1]}')
    elif (H, W) != tuple(img_size):
        raise ValueError(
            f'model was built for {img_size[0]}x{img_size[1]} images, got {H}x{W}; create it with img_size=({H}, {W}) '
            'or dynamic_img_size=True (position embeddings are resampled)')


def check_state_dict(model: torch.nn.Module, state: Dict[str, torch.Tensor], source: str = 'checkpoint',
                     allow: tuple = ()) -> None:
    """ValueError naming missing / unexpected / mis-shaped keys (``allow``: key prefixes exempt,
    e.g. a classifier that timm adapts or drops afterwards)."""
    own = model.state_dict()
    missing = sorted(k for k in set(own) - set(state) if not k.startswith(allow))
    unexpected = sorted(k for k in set(state) - set(own) if not k.startswith(allow))
    shapes = [f'{k}: {tuple(state[k].shape)} vs model {tuple(own[k].shape)}' for k in sorted(set(own) & set(state))
              if state[k].shape != own[k].shape and not k.startswith(allow)]
    if missing or unexpected or shapes:
        raise ValueError(
            f'{source} does not match {type(model).__name__}: '
            + '; '.join(part for part in (
                f'{len(missing)} missing keys {missing[:4]}' if missing else '',
                f'{len(unexpected)} unexpected keys {unexpected[:4]}' if unexpected else '',
                f'shape mismatches {shapes[:4]}' if shapes else '') if part)
            + ' — weights of another architecture or configuration?')


def apply_released_model_args(variant: str, pretrained: bool, kwargs: dict, released: Dict[str, dict]) -> dict:
    """With ``pretrained=True`` on a registered name (``name.tag``), default the model args (solver
    settings, ...) to those the released weights of that tag were trained with; explicit kwargs win.
    Other weights are left alone: a folder or hub repo (``local-dir:``, ``hf-hub:``: timm passes its
    config's pretrained_cfg as a dict, with its own model args) or an overlaid source."""
    overlay = kwargs.get('pretrained_cfg_overlay') or {}
    if isinstance(kwargs.get('pretrained_cfg'), dict) or any(
            overlay.get(k) for k in ('file', 'url', 'hf_hub_id', 'state_dict')):
        return kwargs
    if pretrained and released:
        from timm.models._builder import resolve_pretrained_cfg
        cfg = resolve_pretrained_cfg(variant, pretrained_cfg=kwargs.get('pretrained_cfg'))
        for k, v in released.get(f'{variant}.{cfg.tag}', {}).items():
            kwargs.setdefault(k, v)
    return kwargs
