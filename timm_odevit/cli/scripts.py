"""timm's train.py / validate.py / inference.py / benchmark.py, which are not in the timm wheel: found, in order,
beside ``--timm-train PATH``, beside ``$TIMM_TRAIN_PY``, in the cache
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


def locate_script(
    script: str = 'train.py', explicit: Optional[str] = None, download: bool = True
) -> pathlib.Path:
    """The path of one of timm's :data:`SCRIPTS` (the module's search order); FileNotFoundError saying how to get
    it."""
    env_train = os.environ.get('TIMM_TRAIN_PY')
    cache = os.environ.get('TIMM_ODEVIT_CACHE') or pathlib.Path.home() / '.cache' / 'timm_odevit'
    cached = pathlib.Path(cache) / f'timm-{timm.__version__}' / script
    given = [explicit] if explicit else [env_train, cached, SHARED_SCRIPTS_DIR / script]
    candidates = [pathlib.Path(p).with_name(script) for p in given if p]
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
    """Import one of timm's scripts as a module (its main() is not run); Python's ModuleNotFoundError names a
    package it needs that is not installed (inference.py: pandas, which timm_odevit itself does not need)."""
    spec = importlib.util.spec_from_file_location(f'timm_{path.stem}_script', path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    spec.loader.exec_module(module)
    return module
