"""Hold out a validation split from an ImageFolder train split (the reference selects models on
the test set; we keep test for one final evaluation).

    python -m tools.holdout_split --src ../shared/data/cifar10 --dst data/cifar10_holdout --val-per-class 500

writes ``dst/train`` and ``dst/val`` (symbolic links to the images, a seeded random choice of
``val-per-class`` images per class for val, every image in exactly one of them; the images and classes are
those timm's ImageFolder reader finds, so no class can go missing from one split), ``dst/test``
(a link to ``src/test``) and ``dst/holdout.json`` (the settings), ready for
``train.py --data-dir dst --train-split train --val-split val``. The split is built in a temporary
folder beside ``dst`` and renamed into place when complete, so a failure leaves no partial split.
Re-running with the same settings rebuilds ``dst``; other settings, or a ``dst`` this tool did not
make, are refused (delete it or choose another ``--dst``). Release tooling, not installed: run from the repository
root (train_configs/ and bench/ use the split, and they are in the checkout, not the wheel).
"""
import argparse
import json
import os
import pathlib
import random

from timm_odevit._checks import read_json, replaced_folder
from timm_odevit.data import image_folder

SETTINGS_FILE = 'holdout.json'


def _check_destination(src: pathlib.Path, dst: pathlib.Path, settings: dict) -> None:
    """Refuse a dst that overlaps src, or that holds something other than this split."""
    if dst == src or src in dst.parents or dst in src.parents:
        raise ValueError(
            f'--dst {dst} must be outside --src {src} (and not contain it): the split replaces it whole'
        )
    if not dst.exists() or (dst.is_dir() and not any(dst.iterdir())):
        return
    stamp = dst / SETTINGS_FILE
    if not stamp.is_file():
        raise FileExistsError(
            f'--dst {dst} exists and is not a split made by this tool; delete it or choose another'
        )
    previous = read_json(stamp)
    if previous != settings:
        changed = ', '.join(
            f'{k} {previous.get(k)!r} -> {v!r}' for k, v in settings.items() if previous.get(k) != v
        )
        raise FileExistsError(
            f'{dst} holds a split of other settings ({changed}); delete it or choose another --dst'
        )


def make_holdout_split(src, dst, val_per_class: int = 500, seed: int = 0) -> dict:
    """Split ``src/train/<class>/*`` into ``dst/train`` and ``dst/val`` (``val_per_class`` per class).

    Returns the image counts ``{'train': n_train, 'val': n_val, 'classes': n_classes}`` of ``dst``.
    """
    if isinstance(val_per_class, bool) or not isinstance(val_per_class, int):
        raise TypeError(f'val_per_class must be an integer, got {val_per_class!r}')
    if val_per_class < 1:
        raise ValueError(f'val_per_class must be >= 1, got {val_per_class}')
    from timm.data.readers.img_extensions import get_img_extensions
    src = pathlib.Path(src).resolve()
    dst = pathlib.Path(dst).resolve()
    train = src / 'train'
    # timm's reader: its image extensions, class = leaf folder
    classes, samples = image_folder(src, 'train')
    unread = sorted({d.name for d in train.iterdir() if d.is_dir()} - set(classes))
    if unread:
        raise ValueError(
            f'class folders {unread} of {train} hold no image that timm reads as theirs (one of '
            f'{", ".join(get_img_extensions())} directly inside): the split would drop them; convert them'
        )
    settings = {'src': str(src), 'val_per_class': val_per_class, 'seed': seed}
    _check_destination(src, dst, settings)

    rng = random.Random(seed)
    plan = {}  # class -> (train files, val files), paths relative to src/train
    for index, c in enumerate(classes):
        files = sorted(
            str(pathlib.Path(f).relative_to(train)) for f, target in samples if target == index
        )
        if len(files) <= val_per_class:
            raise ValueError(
                f'class {c!r} has {len(files)} images, cannot hold out {val_per_class} and keep one '
                f'for training; use --val-per-class below {len(files)}'
            )
        val = set(rng.sample(files, val_per_class))
        plan[c] = ([f for f in files if f not in val], sorted(val))

    with replaced_folder(dst) as tmp:  # built beside dst, swapped in whole when complete
        for train_files, val_files in plan.values():
            for split, files in (('train', train_files), ('val', val_files)):
                for f in files:
                    (tmp / split / f).parent.mkdir(parents=True, exist_ok=True)
                    os.symlink(train / f, tmp / split / f)
        if (src / 'test').is_dir():
            os.symlink(src / 'test', tmp / 'test')
        (tmp / SETTINGS_FILE).write_text(json.dumps(settings, indent=1))
    # every class holds out val_per_class
    val = len(classes) * val_per_class
    return {
        'train': len(samples) - val,
        'val': val,
        'classes': len(classes),
    }


def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        '--src',
        required=True,
        help='ImageFolder root with src/train/<class>/<image> (and src/test)',
    )
    p.add_argument('--dst', required=True, help='new split root (outside --src)')
    p.add_argument(
        '--val-per-class', type=int, default=500, help='validation images per class (>= 1)'
    )
    p.add_argument(
        '--seed', type=int, default=0, help='seed of the random choice of validation images'
    )
    args = p.parse_args(argv)
    try:
        counts = make_holdout_split(args.src, args.dst, args.val_per_class, args.seed)
    except (ValueError, TypeError, OSError) as e:
        p.error(str(e))
    print(
        f"{args.dst}: {counts['train']} train and {counts['val']} val images in {counts['classes']} classes "
        f"({args.val_per_class} val per class, seed {args.seed})"
    )


if __name__ == '__main__':
    main()
