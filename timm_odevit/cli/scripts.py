"""timm's train.py / validate.py / inference.py / benchmark.py, which are not in the timm wheel: found, in order,
beside ``--timm-train PATH``, beside ``$TIMM_TRAIN_PY`` (validate.py also at ``$TIMM_VALIDATE_PY``), in the cache
(``$TIMM_ODEVIT_CACHE`` or ~/.cache/timm_odevit/timm-<version>/), in ``../shared/timm/`` beside a checkout of this
project, or downloaded into the cache from the git tag of the installed timm; then imported as modules."""
import importlib.util
import os
import pathlib
import sys
import urllib.request
from typing import Optional

import timm

from .._checks import write_atomic

RAW_URL = 'https://raw.githubusercontent.com/huggingface/pytorch-image-models/v{version}/{script}'
# a source checkout (editable install) sits beside ../shared/timm on this project's machines
SHARED_SCRIPTS_DIR = pathlib.Path(__file__).resolve().parents[3] / 'shared' / 'timm'
SCRIPTS = ('train.py', 'validate.py', 'inference.py', 'benchmark.py')


def cache_dir() -> pathlib.Path:
    root = os.environ.get('TIMM_ODEVIT_CACHE') or pathlib.Path.home() / '.cache' / 'timm_odevit'
    return pathlib.Path(root) / f'timm-{timm.__version__}'


def locate_script(
    script: str = 'train.py', explicit: Optional[str] = None, download: bool = True
) -> pathlib.Path:
    """The path of one of timm's :data:`SCRIPTS` (the module's search order); FileNotFoundError saying how to get
    it."""
    env_train = os.environ.get('TIMM_TRAIN_PY')
    cached = cache_dir() / script
    if explicit:
        candidates = [pathlib.Path(explicit).with_name(script)]
    else:
        env_validate = os.environ.get('TIMM_VALIDATE_PY') if script == 'validate.py' else None
        given = [env_validate, env_train and pathlib.Path(env_train).with_name(script)]
        candidates = [pathlib.Path(p) for p in given if p] + [cached, SHARED_SCRIPTS_DIR / script]
    for path in candidates:
        if path.is_file():
            return path
    if explicit or env_train:
        raise FileNotFoundError(f'timm {script} not found at {candidates[0]}')
    reason = 'downloading is disabled'
    if download:
        url = RAW_URL.format(version=timm.__version__, script=script)
        try:
            with urllib.request.urlopen(url, timeout=15) as response:
                text = response.read()
            cached.parent.mkdir(parents=True, exist_ok=True)
            # never a truncated script in the cache, run by the next call
            write_atomic(cached, text)
            return cached
        except OSError as e:
            reason = f'download from {url} failed ({e})'
    raise FileNotFoundError(
        f"timm's {script} is not in the timm wheel and {reason}: pass --timm-train PATH (or set "
        f'TIMM_TRAIN_PY) from a checkout of timm v{timm.__version__} (git clone --branch '
        f'v{timm.__version__} https://github.com/huggingface/pytorch-image-models)'
    )


def load_script(path: pathlib.Path):
    """Import one of timm's scripts as a module (its main() is not run); SystemExit naming a package it needs
    that is not installed (inference.py: pandas)."""
    spec = importlib.util.spec_from_file_location(f'timm_{path.stem}_script', path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except ModuleNotFoundError as e:
        raise SystemExit(
            f"error: timm's {path.name} needs the package {e.name!r}, which is not installed "
            f'(pip install {e.name}); timm_odevit itself does not need it'
        ) from e
    return module
