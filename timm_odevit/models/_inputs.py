"""Checks of a ViT's patch grid, its pooling and its input images, as ValueErrors that name the problem (the other
construction arguments are checked by :class:`._common.ContinuousDepthViT`)."""
from typing import Tuple

import torch
from timm.layers import PatchEmbed, register_notrace_function, to_2tuple

from .._checks import is_int

GLOBAL_POOL_TYPES = ('', 'token', 'avg', 'max', 'avgmax', 'map', 'prr')


@register_notrace_function  # a leaf call in torch.fx graphs: its checks stay at run time
def check_image_input(
    x: torch.Tensor,
    in_chans: int,
    img_size: Tuple[int, int],
    patch_size: Tuple[int, int],
    dynamic_img_size: bool,
    dynamic_img_pad: bool = False,
) -> None:
    """Raise ValueError for an input the model cannot take, naming what is wrong."""
    if x.ndim != 4:
        raise ValueError(
            f'expected an image batch (B, C, H, W), got a tensor of shape {tuple(x.shape)}'
        )
    if x.shape[1] != in_chans:
        raise ValueError(
            f'model takes {in_chans} input channels, got {x.shape[1]} (input shape {tuple(x.shape)})'
        )
    H, W = x.shape[-2:]
    if dynamic_img_size:
        if not dynamic_img_pad and (H % patch_size[0] or W % patch_size[1]):
            raise ValueError(
                f'image size {H}x{W} is not divisible by the patch size {patch_size[0]}x{patch_size[1]}; '
                'create the model with dynamic_img_pad=True to zero-pad it to the next multiple'
            )
    elif (H, W) != tuple(img_size):
        raise ValueError(
            f'model was built for {img_size[0]}x{img_size[1]} images, got {H}x{W}: create it with '
            f'img_size=({H}, {W}) or dynamic_img_size=True'
        )


class CheckedPatchEmbed(PatchEmbed):
    """timm's PatchEmbed, raising a ValueError that names the problem for an input it cannot take."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_image_input(
            x,
            self.proj.in_channels,
            self.img_size,
            self.patch_size,
            not self.strict_img_size,
            self.dynamic_img_pad,
        )
        return super().forward(x)


def check_patch_grid(img_size, patch_size) -> None:
    """ValueError unless ``img_size`` and ``patch_size`` are positive integers (or pairs), the image size divisible by
    the patch size."""
    img = to_2tuple(img_size)
    patch = to_2tuple(patch_size)
    for name, value in (('img_size', img), ('patch_size', patch)):
        if not all(is_int(v) and v >= 1 for v in value):
            raise ValueError(f'{name} must be positive integers, got {value!r}')
    if img[0] % patch[0] or img[1] % patch[1]:
        raise ValueError(f'img_size {img} is not divisible by patch_size {patch}')


def _check_pool(global_pool: str, has_class_token: bool) -> None:
    if global_pool not in GLOBAL_POOL_TYPES:
        raise ValueError(f'Unknown global_pool {global_pool!r}; choose one of {GLOBAL_POOL_TYPES}')
    if global_pool == 'token' and not has_class_token:
        raise ValueError("global_pool='token' needs class_token=True")
