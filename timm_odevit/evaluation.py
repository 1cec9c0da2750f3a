"""Evaluation: top-1 / top-5 on an ImageFolder split with a model's own preprocessing (timm's eval transform), at
other depths, and beyond the training horizon.

Images are read as timm's ImageFolder reader finds them (timm's image extensions, class = folder), in the mode
timm's scripts read them for the model (RGB, or L for one channel); an unreadable image raises an error naming
the file, where timm's dataset logs it and silently serves the next image instead.
"""
import contextlib
import pathlib
import sys
from typing import Any, Dict, Iterable, List, Sequence, Tuple

import torch

from ._checks import check_int, is_int, is_real
from .anytime import accuracy_at_budgets, eval_mode
from .data import image_folder, open_rgb

# Euler steps of an ODE model / iterations of a recurrent one
DEFAULT_GRIDS = (2, 3, 4, 6, 8, 12, 16, 24)
DATA_KEYS = ('input_size', 'interpolation', 'mean', 'std', 'crop_pct', 'crop_mode')
# what timm's eval transform takes
INTERPOLATIONS = ('nearest', 'bilinear', 'bicubic', 'box', 'hamming', 'lanczos')
CROP_MODES = ('center', 'squash', 'border')  # timm's; another is silently taken as 'center'


# ---- data --------------------------------------------------------------------------------------------
def short(items, n: int = 4) -> str:
    items = list(items)
    return str(items[:n])[:-1] + (f', … {len(items)} in all]' if len(items) > n else ']')


def check_classes(model: torch.nn.Module, classes: List[str], where: str) -> None:
    """ValueError unless the ImageFolder ``classes`` are the model's: as many as its head has outputs, and its
    ``label_names`` (when its pretrained cfg has them) in the same order."""
    num_classes = getattr(model, 'num_classes', None)
    if num_classes != len(classes):
        raise ValueError(
            f'{where} has {len(classes)} classes ({short(classes)}) but the model classifies '
            f'{num_classes}: evaluate it on the dataset it was trained for'
        )
    names = (getattr(model, 'pretrained_cfg', None) or {}).get('label_names')
    if names and list(names) != list(classes):
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
    return create_transform(**{k: data_config[k] for k in DATA_KEYS if k in data_config}), \
        'RGB' if channels == 3 else 'L'


def eval_loader(models: Sequence[torch.nn.Module], data_dir, split: str, batch_size: int = 250,
                workers: int = 2) -> Tuple[List[str], torch.utils.data.DataLoader]:
    """(classes, batches of (images, targets)) of ``data_dir/split`` with the models' shared eval preprocessing;
    the classes are checked against every model."""
    from timm.data import resolve_data_config
    check_int('batch_size', batch_size)
    configs = [resolve_data_config(model=m) for m in models]
    if any(c != configs[0] for c in configs):
        raise ValueError(
            f'the models preprocess differently ({configs}): evaluate them one at a time'
        )
    classes, samples = image_folder(data_dir, split)
    for m in models:
        check_classes(m, classes, str(pathlib.Path(data_dir) / split))
    transform, mode = eval_transform(configs[0])
    images = CheckedImages(samples, transform, mode)
    return classes, torch.utils.data.DataLoader(
        images, batch_size=int(batch_size), num_workers=workers
    )


def batches(loader: Iterable) -> Iterable:
    """The loader's batches; an unreadable image that a worker re-raises (its traceback in the message) is raised
    with its own message, which names the file."""
    try:
        yield from loader
    except ValueError as e:
        raise ValueError(str(e).strip().splitlines()[-1].removeprefix('ValueError: ')) from None


# ---- accuracy ----------------------------------------------------------------------------------------------
@torch.no_grad()
def evaluate(model: torch.nn.Module, data_dir: str, split: str = 'test', batch_size: int = 250,
             workers: int = 2, device: str = 'cpu', progress: bool = False) -> Dict[str, Any]:
    """Top-1/top-5 (%) on an ImageFolder split with the model's own preprocessing (timm's eval transform);
    the result also says what was evaluated: split, classes, image count, NFE."""
    return evaluate_together(
        {'model': model}, data_dir, split, batch_size, workers, device, progress
    )['model']


@torch.no_grad()
def evaluate_together(
    models: Dict[str, torch.nn.Module],
    data_dir: str,
    split: str = 'test',
    batch_size: int = 250,
    workers: int = 2,
    device: str = 'cpu',
    progress: bool = False,
) -> Dict[str, Dict[str, Any]]:
    """:func:`evaluate` of several models that share one preprocessing, in one pass over the images."""
    from tqdm import tqdm
    classes, loader = eval_loader(list(models.values()), data_dir, split, batch_size, workers)
    device = torch.device(device)
    counts = {name: [0, 0, 0] for name in models}  # top-1, top-5, field evaluations x images
    total = 0
    # eval mode while measuring, then each module's own mode back
    with contextlib.ExitStack() as stack:
        for m in models.values():
            stack.enter_context(eval_mode(m.to(device)))
        for x, y in tqdm(
            batches(loader),
            desc=f'evaluating {split}',
            unit='batch',
            disable=not progress,
            file=sys.stderr,
            total=len(loader),
        ):
            x = x.to(device)
            y = y.to(device)
            for name, model in models.items():
                top5 = model(x).topk(min(5, model.num_classes), dim=-1).indices
                counts[name][0] += (top5[:, 0] == y).sum().item()
                counts[name][1] += (top5 == y[:, None]).any(-1).sum().item()
                # an adaptive solver's varies by batch
                counts[name][2] += getattr(model, 'nfe', 0) * y.numel()
            total += y.numel()
    return {name: {'top1': 100. * c1 / total, 'top5': 100. * c5 / total, 'images': total,
                   'nfe': round(nfe / total, 2), 'split': split, 'classes': classes,
                   'data_dir': str(data_dir)} for name, (c1, c5, nfe) in counts.items()}


def check_grids(grids) -> List[int]:
    """``grids`` as a list of ints; ValueError unless it is a non-empty sequence of positive integer depths
    (NumPy integers included)."""
    if isinstance(grids, (str, bytes)) or not hasattr(grids, '__len__') or not len(grids) \
            or not all(is_int(g) and g >= 1 for g in grids):
        raise ValueError(
            f'grids must be positive integers (Euler steps / iterations), got {grids!r}'
        )
    return [int(g) for g in grids]


def evaluate_grids(
    model: torch.nn.Module,
    data_dir: str,
    split: str = 'test',
    grids: Sequence[int] = DEFAULT_GRIDS,
    batch_size: int = 250,
    workers: int = 2,
    device: str = 'cpu',
) -> List[Dict[str, Any]]:
    """Top-1 (%) of a continuous-depth model at each depth of ``grids`` (steps of its solver's method, iterations of
    a recurrence) on an ImageFolder split: :func:`timm_odevit.anytime.accuracy_at_budgets` over the model's own eval
    preprocessing. Returns ``[{'grid', 'depth', 'nfe', 'top1'}, ...]``; the model's own grid is restored."""
    grids = check_grids(grids)
    _, loader = eval_loader([model], data_dir, split, batch_size, workers)
    # restores the modes
    rows = accuracy_at_budgets(model.to(torch.device(device)), batches(loader), grids=grids)
    return [
        {'grid': r['grid'], 'depth': g, 'nfe': r['nfe'], 'top1': r['top1']}
        for g, r in zip(grids, rows)
    ]


@torch.no_grad()
def accuracy_vs_iterations(
    model: torch.nn.Module,
    loader: Iterable[Tuple[torch.Tensor, torch.Tensor]],
    iterations: int,
    device=None,
) -> List[Dict[str, float]]:
    """Top-1 accuracy (%) at every time point up to ``iterations`` ("beyond the training horizon").

    Runs the model once per batch to the horizon ``iterations`` (``model.set_iterations``; the
    trained horizon is restored afterwards) and classifies every intermediate state with the
    final head (stage heads at their own stages). For a recurrent bViT, point k is iteration k;
    in the ODE regime point k is time k·h.

    Returns: [{'point': k, 'time': t_k, 'top1': acc}, ...] for k = 1..points.
    """
    if not hasattr(model, 'set_iterations') or not hasattr(model, 'forward_stages'):
        raise TypeError(
            f'{type(model).__name__} has no iterations to vary (needs set_iterations and forward_stages)'
        )
    trained = model.iterations
    with eval_mode(model):  # the modes come back after the trained horizon (its interval modules)
        try:
            model.set_iterations(iterations)
            points = model.num_time_points
            correct = torch.zeros(points, dtype=torch.long)
            total = 0
            for x, y in loader:
                if device is not None:
                    x = x.to(device)
                    y = y.to(device)
                logits = model.forward_stages(x, stages=range(1, points + 1))
                correct += torch.stack([(lg.argmax(-1) == y).sum() for lg in logits]).cpu()
                total += y.numel()
        finally:
            model.set_iterations(trained)
    if total == 0:
        raise ValueError('the loader yielded no samples')
    step = iterations / points
    return [
        {'point': k + 1, 'time': (k + 1) * step, 'top1': 100.0 * correct[k].item() / total}
        for k in range(points)
    ]
