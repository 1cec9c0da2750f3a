"""Small in-memory CIFAR-10 subsets from the local ImageFolder (for CPU-sized benchmark runs)."""
import os
import pathlib
from typing import Tuple

import numpy as np
import torch
from PIL import Image

DEFAULT_ROOT = pathlib.Path(__file__).resolve().parents[1].parent / 'shared' / 'data' / 'cifar10'
MEAN = torch.tensor((0.4914, 0.4822, 0.4465)).view(1, 3, 1, 1)
STD = torch.tensor((0.2470, 0.2435, 0.2616)).view(1, 3, 1, 1)


def load_split(root, split: str, per_class: int, offset: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """Images [offset, offset + per_class) of each class (sorted file names), normalised (N, 3, 32, 32)."""
    root = pathlib.Path(root) / split
    classes = sorted(d for d in os.listdir(root) if (root / d).is_dir())
    if not classes:
        raise FileNotFoundError(f'no class folders under {root}')
    xs, ys = [], []
    for label, c in enumerate(classes):
        files = sorted(os.listdir(root / c))[offset:offset + per_class]
        xs += [np.asarray(Image.open(root / c / f).convert('RGB')) for f in files]
        ys += [label] * len(files)
    x = torch.from_numpy(np.stack(xs)).permute(0, 3, 1, 2).float() / 255.
    return (x - MEAN) / STD, torch.tensor(ys)


def augment(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Random horizontal flip + 4-px reflect-pad random crop, per sample."""
    B = x.shape[0]
    flip = torch.rand(B, generator=generator) < 0.5
    x = torch.where(flip.view(B, 1, 1, 1), x.flip(-1), x)
    padded = torch.nn.functional.pad(x, (4, 4, 4, 4), mode='reflect')
    i, j = torch.randint(0, 9, (2, B), generator=generator)
    return torch.stack([padded[b, :, i[b]:i[b] + 32, j[b]:j[b] + 32] for b in range(B)])


def make_subset(src: pathlib.Path, dst: pathlib.Path, splits: dict) -> None:
    """Symlinked ImageFolder: ``splits`` maps dst split -> (src split, first n images per class)."""
    for out, (split, n) in splits.items():
        classes = sorted(p.name for p in (src / split).iterdir() if p.is_dir())
        if not classes:
            raise SystemExit(f'no class folders in {src / split}')
        for cls in classes:
            (dst / out / cls).mkdir(parents=True, exist_ok=True)
            for f in sorted((src / split / cls).iterdir())[:n]:
                (dst / out / cls / f.name).symlink_to(f.resolve())
