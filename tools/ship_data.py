"""Move ImageFolder trees to a machine reached through a size-capped transfer, pixel for pixel.

The images are decoded to RGB (what an ImageFolder loader gives the model; an alpha channel or a palette is not
kept), re-encoded as lossless WebP (about 0.6x the bytes of CIFAR-10's PNGs) and packed into numbered parts of at most
``--max-mb`` each, the whole file (one ``.npz`` per part: the encoded bytes, their offsets and their relative paths,
without the suffix: two images differing only in suffix are refused), beside a manifest with the image count and a
SHA-256 over every image's path, size and RGB pixels. ``unpack`` writes the images back as PNG and refuses the result
unless that digest matches: the trees arrive as they left, or not at all.

    python -m tools.ship_data pack OUT_DIR NAME=IMAGEFOLDER_ROOT ... [--max-mb 60]
    python -m tools.ship_data unpack DST MANIFEST PART ...      # DST/NAME/<split>/<class>/<image>.png

e.g. the held-out split and the test images, in parts that each fit one device call beside the checkout:
``pack devdata/ship holdout=data/cifar10_holdout test=../shared/data/cifar10/test --max-mb 60``.
"""
import argparse
import collections
import hashlib
import io
import json
import os
import pathlib
import shutil
from concurrent.futures import ProcessPoolExecutor
from typing import Dict, List, Sequence, Tuple

import numpy as np
from PIL import Image

from tools.atomic import write_atomic

SUFFIXES = ('.png', '.jpg', '.jpeg', '.webp')
NPZ_OVERHEAD = 4096  # bytes of a part's .npz beyond its arrays' data (zip and .npy headers), kept free


def _pixels(im: Image.Image) -> bytes:
    """The RGB pixels and the size (two images of one pixel count but other shapes differ)."""
    return f'{im.size}'.encode() + np.asarray(im.convert('RGB')).tobytes()


def _encode(path: pathlib.Path) -> Tuple[bytes, str]:
    im = Image.open(path).convert('RGB')
    buf = io.BytesIO()
    im.save(buf, 'WEBP', lossless=True, quality=100, method=2)  # method 2: smaller and ~25x faster than 6 here
    return buf.getvalue(), hashlib.sha256(_pixels(im)).hexdigest()


def _decode(job: Tuple[bytes, str]) -> str:
    blob, dst = job
    im = Image.open(io.BytesIO(blob)).convert('RGB')
    pathlib.Path(dst).parent.mkdir(parents=True, exist_ok=True)
    im.save(dst, 'PNG')
    return hashlib.sha256(_pixels(Image.open(dst))).hexdigest()


def digest(names: Sequence[str], pixel_hashes: Sequence[str]) -> str:
    """SHA-256 over the sorted (relative path, pixel hash) pairs: independent of encoding, order and part."""
    h = hashlib.sha256()
    for name, x in sorted(zip(names, pixel_hashes)):
        h.update(f'{name} {x}\n'.encode())
    return h.hexdigest()


def _write_part(path: pathlib.Path, names: List[str], blobs: List[bytes]) -> None:
    buf = io.BytesIO()
    np.savez(buf, data=np.frombuffer(b''.join(blobs), np.uint8),
             offsets=np.cumsum([0] + [len(b) for b in blobs]).astype(np.int64),
             names=np.frombuffer(json.dumps(names).encode(), np.uint8))
    write_atomic(path, buf.getvalue())


def _refuse_repeats(names: Sequence[str]) -> None:
    repeated = [n for n, count in collections.Counter(names).items() if count > 1]
    if repeated:
        raise SystemExit(f'{len(repeated)} image paths (without suffix) occur more than once, e.g. {repeated[0]!r}: '
                         'they would overwrite each other')


def pack(out: pathlib.Path, trees: Dict[str, pathlib.Path], max_mb: float, workers: int = os.cpu_count()) -> dict:
    """Encode every image under each ``trees[name]`` and write parts of at most ``max_mb`` MB (the whole file) and
    ``manifest.json``."""
    if any('/' in name or not name for name in trees):
        raise SystemExit(f'tree names must be plain folder names: {list(trees)}')
    files = [(f'{name}/{f.relative_to(root).with_suffix("")}', f) for name, root in trees.items()
             for f in sorted(pathlib.Path(root).rglob('*')) if f.suffix.lower() in SUFFIXES]
    if not files:
        raise SystemExit(f'no images under {", ".join(map(str, trees.values()))}')
    _refuse_repeats([n for n, _ in files])
    with ProcessPoolExecutor(workers) as pool:
        encoded = list(pool.map(_encode, [f for _, f in files], chunksize=256))
    out.mkdir(parents=True, exist_ok=True)
    limit, parts, names, blobs, size = max_mb * 1e6 - NPZ_OVERHEAD, [], [], [], 0
    for (name, _), (blob, _) in zip(files, encoded):
        stored = len(blob) + 8 + len(json.dumps(name)) + 2  # its bytes, its int64 offset, its entry in the names list
        if names and size + stored > limit:
            parts.append(f'part{len(parts)}.npz')
            _write_part(out / parts[-1], names, blobs)
            names, blobs, size = [], [], 0
        names.append(name), blobs.append(blob)
        size += stored
    parts.append(f'part{len(parts)}.npz')
    _write_part(out / parts[-1], names, blobs)
    manifest = {'images': len(files), 'digest': digest([n for n, _ in files], [h for _, h in encoded]), 'parts': parts}
    write_atomic(out / 'manifest.json', json.dumps(manifest, indent=1) + '\n')
    return manifest


def unpack(dst: pathlib.Path, manifest: dict, parts: Sequence[pathlib.Path], workers: int = os.cpu_count()) -> None:
    """Write the parts' images as PNG under ``dst`` (whole or not at all) and check them against ``manifest``."""
    if dst.exists():
        raise SystemExit(f'{dst} exists: unpack into a new folder')
    staging = dst.with_name(f'.{dst.name}.partial')
    shutil.rmtree(staging, ignore_errors=True)
    try:
        jobs, names = [], []
        for part in parts:
            with np.load(part) as z:
                data, offsets = z['data'].tobytes(), z['offsets']
                part_names = json.loads(z['names'].tobytes().decode())
            jobs += [(data[offsets[i]:offsets[i + 1]], str(staging / f'{n}.png')) for i, n in enumerate(part_names)]
            names += part_names
        _refuse_repeats(names)  # a part given twice
        with ProcessPoolExecutor(workers) as pool:
            hashes = list(pool.map(_decode, jobs, chunksize=256))
    except SystemExit:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    except Exception as e:  # a part that is not one, an image that does not decode
        shutil.rmtree(staging, ignore_errors=True)
        raise SystemExit(f'cannot unpack: {type(e).__name__}: {e}') from e
    got = digest(names, hashes)
    if len(names) != manifest['images'] or got != manifest['digest']:
        shutil.rmtree(staging, ignore_errors=True)
        raise SystemExit(f'{len(names)} images with digest {got}; the manifest says {manifest["images"]} with '
                         f'{manifest["digest"]}: a part is missing, repeated or damaged')
    staging.rename(dst)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest='cmd', required=True)
    pk = sub.add_parser('pack')
    pk.add_argument('out', type=pathlib.Path)
    pk.add_argument('trees', nargs='+', help='NAME=IMAGEFOLDER_ROOT')
    pk.add_argument('--max-mb', type=float, default=60.)
    up = sub.add_parser('unpack')
    up.add_argument('dst', type=pathlib.Path)
    up.add_argument('manifest', type=pathlib.Path)
    up.add_argument('parts', nargs='+', type=pathlib.Path)
    args = p.parse_args(argv)
    if args.cmd == 'pack':
        trees = dict(t.split('=', 1) for t in args.trees)
        if len(trees) != len(args.trees):
            raise SystemExit(f'a tree NAME is given twice: {args.trees}')
        m = pack(args.out, {k: pathlib.Path(v) for k, v in trees.items()}, args.max_mb)
        print(f'{m["images"]} images in {len(m["parts"])} parts under {args.out}, digest {m["digest"]}')
    else:
        unpack(args.dst, json.loads(args.manifest.read_text()), args.parts)
        print(f'{args.dst}: images match the manifest')


if __name__ == '__main__':
    main()
