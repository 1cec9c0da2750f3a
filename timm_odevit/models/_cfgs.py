"""timm pretrained cfgs of the CIFAR models, the weights packaged with them, and the input size a built model's
cfg follows."""
import pathlib
from typing import Dict, Optional, Sequence, Tuple

from torch import nn
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
CIFAR10_LABELS = (
    'airplane',
    'automobile',
    'bird',
    'cat',
    'deer',
    'dog',
    'frog',
    'horse',
    'ship',
    'truck',
)
CIFAR100_MEAN = (0.5071, 0.4865, 0.4409)
CIFAR100_STD = (0.2673, 0.2564, 0.2762)
CIFAR100_CFG = dict(num_classes=100, mean=CIFAR100_MEAN, std=CIFAR100_STD)
IMAGENET_INPUT = dict(
    input_size=(3, 224, 224),
    mean=IMAGENET_DEFAULT_MEAN,
    std=IMAGENET_DEFAULT_STD,
)
IMAGENET_CFG = dict(IMAGENET_INPUT, num_classes=1000)

PACKAGED_WEIGHTS_DIR = pathlib.Path(__file__).resolve().parents[1] / 'weights'


def packaged_weights(name: str) -> pathlib.Path:
    """Where the installed package keeps the released weights of ``name`` (``<model>.<tag>``): package data
    ``timm_odevit/weights/<name>/model.safetensors`` and the ``config.json`` beside it, byte-for-byte copies of
    ``release/<name>/``."""
    return PACKAGED_WEIGHTS_DIR / name / 'model.safetensors'


def cifar_cfg(packaged: str = '', **kwargs) -> Dict:
    """timm pretrained cfg for a 32 px CIFAR-10 model (override url / num_classes / mean / std / input_size).
    ``packaged``: the ``<model>.<tag>`` whose weights ship inside the package (:func:`packaged_weights`): its
    ``file``, which timm loads before ``hf_hub_id`` (an explicit ``hf-hub:`` name still goes to the Hub); left
    out when the file is not installed, so timm falls back to ``hf_hub_id``."""
    if packaged and packaged_weights(packaged).is_file():
        kwargs = {'file': str(packaged_weights(packaged)), **kwargs}
    return {
        'url': '',
        'num_classes': 10,
        'input_size': (3, 32, 32),
        'crop_pct': 1.0,
        # True: a model takes other sizes only when built with dynamic_img_size=True
        'fixed_input_size': True,
        'mean': CIFAR10_MEAN,
        'std': CIFAR10_STD,
        'first_conv': 'patch_embed.proj',
        'classifier': 'head',
        'license': 'apache-2.0',
        **kwargs,
    }


def follow_input_size(model: nn.Module, built: Optional[Tuple[int, ...]] = None) -> None:
    """Set ``model.pretrained_cfg``'s input_size (and mean / std per channel) to what the model is built for
    (its patch embedding's in_chans and img_size). ``built``: change it only if it still says this size."""
    img_size = getattr(getattr(model, 'patch_embed', None), 'img_size', None)  # None for features_only wrappers
    cfg = getattr(model, 'pretrained_cfg', None)  # None: built by its class, not by timm's factory
    if cfg is None or not img_size:
        return
    size = (image_channels(model), *img_size)
    current = tuple(cfg.get('input_size', ()))
    if current != size and (built is None or current == tuple(built)):
        model.pretrained_cfg = model.default_cfg = dict(
            cfg,
            input_size=size,
            **{k: per_channel(cfg[k], size[0]) for k in ('mean', 'std') if k in cfg},
        )


def image_channels(model: nn.Module) -> int:
    """The image channels a timm ViT reads (its ``in_chans``: a hybrid ViT's backbone stem reads them, its patch
    projection reads the stem's features)."""
    return model.in_chans


def per_channel(values: Sequence[float], channels: int) -> Tuple[float, ...]:
    """Normalization ``mean`` / ``std`` for ``channels`` input channels, as timm's ``adapt_input_conv`` maps
    an RGB first conv: one channel takes the average, more channels repeat R, G, B cyclically."""
    values = tuple(values)
    if channels == 1 and len(values) != 1:
        return (sum(values) / len(values),)
    return tuple(values[i % len(values)] for i in range(channels))
