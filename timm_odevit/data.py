"""Hold out a validation split from an ImageFolder train split (the reference selects models on
the test set; we keep test for one final evaluation).

    python -m timm_odevit.data --src ../shared/data/cifar10 --dst data/cifar10_holdout --val-per-class 500

writes ``dst/train`` and ``dst/val`` (symbolic links to the images, a seeded random choice of
``val-per-class`` images per class for val) and ``dst/test`` (a link to ``src/test``), ready for
``train.py --data-dir dst --train-split train --val-split val``.
"""
import argparse
import os
import pathlib
import random

IMAGE_EXTS = {'.png', '.jpg', '.jpeg', '.bmp', '.webp'}


def make_holdout_split(src, dst, val_per_class: int = 500, seed: int = 0) -> dict:
    src, dst = pathlib.Path(src).resolve(), pathlib.Path(dst)
    train = src / 'train'
    classes = sorted(d.name for d in train.iterdir() if d.is_dir()) if train.is_dir() else []
    if not classes:
        raise FileNotFoundError(f'no class folders under {train} (expected {train}/<class>/<image>)')
    counts = {'train': 0, 'val': 0}
    rng = random.Random(seed)
    for c in classes:
        files = sorted(f.name for f in (train / c).iterdir() if f.suffix.lower() in IMAGE_EXTS)
        if len(files) <= val_per_class:
            raise ValueError(f'class {c!r} has {len(files)} images, cannot hold out {val_per_class}')
        val = set(rng.sample(files, val_per_class))
        for split in ('train', 'val'):
            (dst / split / c).mkdir(parents=True, exist_ok=True)
        for f in files:
            split = 'val' if f in val else 'train'
            link = dst / split / c / f
            if not link.exists():
                os.symlink(train / c / f, link)
            counts[split] += 1
    test_link = dst / 'test'
    if (src / 'test').is_dir() and not test_link.exists():
        os.symlink(src / 'test', test_link)
    return counts


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--src', required=True)
    p.add_argument('--dst', required=True)
    p.add_argument('--val-per-class', type=int, default=500)
    p.add_argument('--seed', type=int, default=0)
    args = p.parse_args()
    print(make_holdout_split(args.src, args.dst, args.val_per_class, args.seed))


if __name__ == '__main__':
    main()
