"""The evaluation loader: an ImageFolder split with a model's own preprocessing (timm's eval transform).

Images are read as timm's ImageFolder reader finds them (timm's image extensions, class = folder), in the mode
timm's scripts read them for the model (RGB, or L for one channel); an unreadable image raises an error naming
the file, where timm's dataset logs it and silently serves the next image instead.
"""
import pathlib
from typing import Any, Dict, Iterable, List, Tuple

import torch

from ._checks import is_real
from .data import image_folder, open_rgb

# what timm's eval transform takes
INTERPOLATIONS = ('nearest', 'bilinear', 'bicubic', 'box', 'hamming', 'lanczos')
CROP_MODES = ('center', 'squash', 'border')  # timm's; another is silently taken as 'center'


def short(items, n: int = 4) -> str:
    items = list(items)
    return str(items[:n])[:-1] + (f', … {len(items)} in all]' if len(items) > n else ']')


def check_classes(model: torch.nn.Module, classes: List[str], where: str) -> None:
    """ValueError unless the ImageFolder ``classes`` are the model's: as many as its head has outputs, and its
    ``label_names`` (when its pretrained cfg has them) in the same order."""
    if model.num_classes != len(classes):
        raise ValueError(
            f'{where} has {len(classes)} classes ({short(classes)}) but the model classifies '
            f'{model.num_classes}: evaluate it on the dataset it was trained for'
        )
    names = (getattr(model, 'pretrained_cfg', None) or {}).get('label_names')
    if names and list(names) != classes:
        raise ValueError(
            f'{where} classes {short(classes)} are not the model\'s label_names {short(names)}'
        )


class CheckedImages(torch.utils.data.Dataset):
    """(image, class) of a list of files, read in ``mode`` ('RGB', or 'L' for one channel, as timm's scripts read
    them); an unreadable image raises naming the file."""

    def __init__(self, samples: List[Tuple[str, int]], transform, mode: str = 'RGB'):
        self.samples = samples
        self.transform = transform
        self.mode = mode

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        path, target = self.samples[index]
        return self.transform(open_rgb(path).convert(self.mode)), target


def eval_transform(data_config: Dict[str, Any]):
    """timm's eval transform of a resolved data config and the image mode it takes; ValueError for normalisation
    that is not one value in [0, 1] (mean) or > 0 (std) per input channel, a crop or an interpolation timm would
    silently replace."""
    from timm.data import create_transform
    channels = data_config['input_size'][0]
    crop = data_config.get('crop_pct', 1)
    mean = data_config['mean']
    std = data_config['std']
    if (
        not all(
            isinstance(v, (list, tuple)) and len(v) == channels and all(map(is_real, v))
            for v in (mean, std)
        )
        or min(std) <= 0
        or not all(0 <= m <= 1 for m in mean)
    ):
        raise ValueError(
            f'pretrained_cfg mean {mean!r} and std {std!r} must each give {channels} values, mean in '
            '[0, 1] and std > 0: fix them'
        )
    mode = data_config.get('crop_mode') or 'center'
    interpolation = data_config.get('interpolation') or 'bilinear'
    if (
        not (is_real(crop) and 0 < crop <= 1)
        or mode not in CROP_MODES
        or interpolation not in INTERPOLATIONS
    ):
        raise ValueError(
            f'pretrained_cfg crop_pct {crop!r} (in (0, 1]), crop_mode {mode!r} ({", ".join(CROP_MODES)}) '
            f'or interpolation {interpolation!r} ({", ".join(INTERPOLATIONS)}) is not one timm applies'
        )
    return create_transform(**data_config), 'RGB' if channels == 3 else 'L'


def eval_loader(model: torch.nn.Module, data_dir, split: str, batch_size: int = 250,
                workers: int = 2) -> Tuple[List[str], torch.utils.data.DataLoader]:
    """(classes, batches of (images, targets)) of ``data_dir/split`` with the model's eval preprocessing; the classes
    are checked against the model's."""
    from timm.data import resolve_data_config
    classes, samples = image_folder(data_dir, split)
    check_classes(model, classes, str(pathlib.Path(data_dir) / split))
    transform, mode = eval_transform(resolve_data_config(model=model))
    images = CheckedImages(samples, transform, mode)
    return classes, torch.utils.data.DataLoader(
        images, batch_size=batch_size, num_workers=workers
    )


def batches(loader: Iterable) -> Iterable:
    """The loader's batches; an unreadable image that a worker re-raises (its traceback in the message) is raised
    with its own message, which names the file."""
    try:
        yield from loader
    except ValueError as e:
        raise ValueError(str(e).strip().splitlines()[-1].removeprefix('ValueError: ')) from None
