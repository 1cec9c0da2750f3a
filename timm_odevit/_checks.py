"""Checks and file writes shared by the package: number types (bools are not numbers here: ``steps=True`` is an
error), mappings, JSON and YAML files whose errors name the file, and writes that an interruption cannot leave half
done."""
import contextlib
import json
import math
import numbers
from collections.abc import Mapping
import os
import pathlib
import shutil
import uuid


def is_int(value) -> bool:
    """An integer (Python or NumPy), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value) -> bool:
    """A real number (int, float, NumPy scalar), not a bool; may be inf / nan."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_int(name: str, value, minimum: int = 1) -> int:
    """``value`` as an int; ValueError unless it is an integer >= ``minimum``."""
    if not is_int(value) or value < minimum:
        raise ValueError(f'{name} must be an integer >= {minimum}, got {value!r}')
    return int(value)


def check_number(name: str, value, positive: bool = False) -> float:
    """``value`` as a float; ValueError unless it is a finite number >= 0 (> 0 with ``positive``)."""
    if not is_real(value) or not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(
            f'{name} must be a finite number {">" if positive else ">="} 0, got {value!r}'
        )
    return float(value)


def check_dict(name: str, value) -> dict:
    """``value`` as a dict; ValueError naming ``name`` unless it is a mapping of name: value (a JSON object, a YAML
    mapping, a dict)."""
    if not isinstance(value, Mapping):
        raise ValueError(
            f'{name} must be a mapping of name: value, got a {type(value).__name__}: {value!r}'
        )
    return dict(value)


def read_json(path) -> dict:
    """The JSON object in the file at ``path``; ValueError naming the file when it cannot be read, is truncated or
    hand-edited into something else."""
    try:
        value = json.loads(pathlib.Path(path).read_text())
    except (OSError, ValueError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ValueError(
            f'cannot read {path} ({type(e).__name__}: {e}): restore or regenerate the file'
        ) from e
    if not isinstance(value, dict):
        raise ValueError(
            f'{path} holds a JSON {type(value).__name__}, not a dict: restore or regenerate it'
        )
    return value


def read_yaml(path, what: str = '') -> dict:
    """The YAML mapping in the file at ``path``; ValueError naming the file (``what``: how the user gave it, e.g.
    '--config '), and the line and column of a syntax error, when it cannot be read or holds something else."""
    import yaml
    try:
        value = yaml.safe_load(pathlib.Path(path).read_text())
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f', line {mark.line + 1}, column {mark.column + 1}' if mark else ''
        raise ValueError(
            f'{what}{path}{where}: not valid YAML ({e.problem or e.context})'
        ) from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ValueError(f'cannot read {what}{path} ({type(e).__name__}: {e})') from None
    if not isinstance(value, dict):
        raise ValueError(
            f'{what}{path} must be a YAML mapping of option: value, got {type(value).__name__}'
        )
    return value


CONFIG_TYPES = {'architecture': str, 'num_classes': int, 'pretrained_cfg': dict, 'model_args': dict,
                'label_names': list}


def read_config(folder) -> dict:
    """The timm ``config.json`` of a model folder; ValueError naming the file when it is not one (timm's own
    ``local-dir:`` loader raises a bare JSONDecodeError / KeyError, which the package leaves as it is)."""
    path = pathlib.Path(folder) / 'config.json'
    config = read_json(path)
    # JSON values are of these exact types (a bool is no int); the architecture is required
    wrong = [f'"{k}" must be a JSON {kind.__name__}' for k, kind in CONFIG_TYPES.items()
             if (k in config or k == 'architecture') and type(config.get(k)) is not kind]
    if wrong:
        raise ValueError(
            f'{path} is not a valid timm config.json ({"; ".join(wrong)}): fix it or export it again'
        )
    return config


def write_atomic(path, data) -> None:
    """``path`` holds ``data`` (str or bytes) afterwards, or what it held before, never a part: written to a temporary
    file in the same folder (created as ``open`` creates files: the umask's permissions), synced, then
    ``os.replace``d over it."""
    path = pathlib.Path(path)
    tmp = path.with_name(f'.{path.name}.{uuid.uuid4().hex[:8]}.tmp')
    try:
        with open(tmp, 'xb') as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def replaced_folder(dst):
    """A new folder beside ``dst`` to build in, swapped in whole as ``dst`` when the block ends without an error (the
    old ``dst`` is kept until the swap has succeeded) and removed otherwise. What a killed run left beside ``dst`` is
    tidied first: a swap cut between its two renames is undone. A ``dst`` that is a file is refused
    (NotADirectoryError), not replaced."""
    dst = pathlib.Path(dst)
    if dst.exists() and not dst.is_dir():
        raise NotADirectoryError(f'{dst} is a file, not a folder: choose a folder to write')
    dst.parent.mkdir(parents=True, exist_ok=True)
    for left in sorted(dst.parent.glob(f'.{dst.name}.partial-*')):
        if left.name.endswith('.old') and not dst.exists():
            left.rename(dst)
        else:
            shutil.rmtree(left, ignore_errors=True)
    tmp = dst.with_name(f'.{dst.name}.partial-{uuid.uuid4().hex[:8]}')
    tmp.mkdir()  # with the umask's permissions (tempfile's folders are private)
    old = tmp.with_name(tmp.name + '.old')
    try:
        yield tmp
        if dst.exists():
            dst.rename(old)
        try:
            tmp.rename(dst)
        except BaseException:
            if old.exists():
                old.rename(dst)
            raise
    finally:  # symbolic links inside are removed, never followed
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
