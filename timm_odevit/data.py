"""Images as timm's ImageFolder reader finds them, and image files read as 8-bit RGB (evaluation, export,
inspection). The held-out split of a training folder is release tooling: ``python -m tools.holdout_split``."""
import pathlib
from typing import List, Tuple

_16_BIT_MODES = ('I;16', 'I;16L', 'I;16B', 'I;16N')


def image_folder(data_dir, split: str) -> Tuple[List[str], List[Tuple[str, int]]]:
    """(classes, [(image path, class index)]) of ``data_dir/split`` as timm's ImageFolder reader sees it;
    ValueError naming the folder when it is missing, empty, or holds images outside class folders."""
    from timm.data.readers.reader_image_folder import find_images_and_targets
    folder = pathlib.Path(data_dir) / split
    if not folder.is_dir():
        raise ValueError(
            f'no split {split!r}: {folder} is not a folder; give an ImageFolder root DIR/{split}/<class>/'
        )
    samples, class_to_idx = find_images_and_targets(str(folder))
    if not samples:
        raise ValueError(
            f'no images in {folder}: expected {folder}/<class>/<image> with timm\'s image extensions'
        )
    if '' in class_to_idx:
        loose = next(path for path, target in samples if target == class_to_idx[''])
        raise ValueError(
            f'{folder} holds images outside class folders (e.g. {loose}): move them to {folder}/<class>/'
        )
    return sorted(class_to_idx, key=class_to_idx.get), samples


def open_rgb(path) -> 'PIL.Image.Image':
    """An image file as 8-bit RGB; ValueError naming the file when it cannot be read or converted faithfully.

    16-bit greyscale (PNG ``I;16``) keeps its high byte — Pillow's own ``convert('RGB')`` clips it to white —,
    palette images go through RGBA (their transparency index is dropped, not their colours); 32-bit integer
    and float images, whose value range the file does not state, are refused.
    """
    from PIL import Image, UnidentifiedImageError
    try:
        with Image.open(path) as img:
            img.load()
            if img.mode in _16_BIT_MODES:
                import numpy as np
                grey = (np.asarray(img).astype(np.uint32) >> 8).astype(np.uint8)
                return Image.fromarray(grey, mode='L').convert('RGB')
            if img.mode in ('I', 'F'):
                raise ValueError(
                    f'{img.mode!r} ({"32-bit integer" if img.mode == "I" else "float"}) pixels have no '
                    'stated range; save it as 8- or 16-bit'
                )
            if img.mode in ('P', 'PA'):
                img = img.convert('RGBA')
            return img.convert('RGB')
    except (OSError, UnidentifiedImageError, ValueError, SyntaxError) as e:
        raise ValueError(f'cannot read image {str(path)!r}: {e}') from e
