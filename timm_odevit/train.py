"""Run timm's own train.py / validate.py with timm_odevit's models registered.

    python -m timm_odevit.train [--timm-train PATH] TRAIN_PY_ARGS...
    python -m timm_odevit.train --validate [--timm-train PATH] VALIDATE_PY_ARGS...

timm's train.py is not in the timm wheel. It is found, in order, at ``--timm-train PATH``, at
``$TIMM_TRAIN_PY`` (validate.py is looked for beside it, or at ``$TIMM_VALIDATE_PY``), in the
cache (``$TIMM_ODEVIT_CACHE`` or ~/.cache/timm_odevit/timm-<version>/), or downloaded into that
cache from the git tag matching the installed timm. Without any of these it stops with a message
saying how to get it. Every flag of train.py keeps working, including ``--config`` and torchrun.

The path without this wrapper: ``python train.py --device-modules timm_odevit ...`` (train.py
imports the listed modules at start, which registers the models).
"""
import argparse
import importlib.util
import os
import pathlib
import sys
import urllib.request
from typing import List, Optional

import timm

RAW_URL = 'https://raw.githubusercontent.com/huggingface/pytorch-image-models/v{version}/{script}'


def cache_dir() -> pathlib.Path:
    root = os.environ.get('TIMM_ODEVIT_CACHE') or pathlib.Path.home() / '.cache' / 'timm_odevit'
    return pathlib.Path(root) / f'timm-{timm.__version__}'


def locate_script(script: str = 'train.py', explicit: Optional[str] = None, download: bool = True) -> pathlib.Path:
    """Find timm's ``train.py`` or ``validate.py`` (see module docstring for the search order)."""
    candidates = []
    if explicit:
        path = pathlib.Path(explicit)
        candidates.append(path if path.name == script else path.with_name(script))
    env_train = os.environ.get('TIMM_TRAIN_PY')
    if script == 'validate.py' and os.environ.get('TIMM_VALIDATE_PY'):
        candidates.append(pathlib.Path(os.environ['TIMM_VALIDATE_PY']))
    if env_train:
        candidates.append(pathlib.Path(env_train).with_name(script))
    cached = cache_dir() / script
    candidates.append(cached)
    for path in candidates:
        if path.is_file():
            return path
    if explicit or env_train:
        raise FileNotFoundError(f'timm {script} not found at {candidates[0]}')
    if download:
        url = RAW_URL.format(version=timm.__version__, script=script)
        try:
            with urllib.request.urlopen(url, timeout=15) as response:
                text = response.read()
            cached.parent.mkdir(parents=True, exist_ok=True)
            cached.write_bytes(text)
            return cached
        except OSError as e:
            reason = f'download from {url} failed ({e})'
    else:
        reason = 'downloading is disabled'
    raise FileNotFoundError(
        f"timm's {script} is not part of the timm wheel and {reason}. Get it from a timm checkout of the "
        f'tag v{timm.__version__} (git clone --branch v{timm.__version__} '
        'https://github.com/huggingface/pytorch-image-models) and pass --timm-train /path/to/train.py, '
        f'set TIMM_TRAIN_PY, or copy it to {cached}.')


def load_script(path: pathlib.Path):
    """Import train.py / validate.py as a module (its main() is not run)."""
    spec = importlib.util.spec_from_file_location(f'timm_{path.stem}_script', path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    spec.loader.exec_module(module)
    return module


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument('--timm-train', default=None, help='path to timm train.py (validate.py is found beside it)')
    parser.add_argument('--validate', action='store_true', help="run timm's validate.py instead of train.py")
    ours, rest = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    import timm_odevit  # noqa: F401  (registers the models)

    script = 'validate.py' if ours.validate else 'train.py'
    try:
        path = locate_script(script, ours.timm_train)
    except FileNotFoundError as e:
        raise SystemExit(f'error: {e}')
    module = load_script(path)
    if not any(a == '--device' or a.startswith('--device=') for a in rest):
        import torch
        if not torch.cuda.is_available():  # train.py defaults to cuda; run on the CPU instead of failing
            rest = rest + ['--device', 'cpu']
    sys.argv = [str(path)] + rest
    module.main()


def validate_main() -> None:
    main(['--validate'] + sys.argv[1:])


if __name__ == '__main__':
    main()
