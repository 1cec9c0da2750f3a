"""Run timm's own train.py / validate.py with timm_odevit's models registered.

    python -m timm_odevit.train [--timm-train PATH] TRAIN_PY_ARGS...
    python -m timm_odevit.train --validate [--timm-train PATH] VALIDATE_PY_ARGS...

timm's train.py is not in the timm wheel. It is found, in order, at ``--timm-train PATH``, at
``$TIMM_TRAIN_PY`` (validate.py is looked for beside it, or at ``$TIMM_VALIDATE_PY``), in the
cache (``$TIMM_ODEVIT_CACHE`` or ~/.cache/timm_odevit/timm-<version>/), in ``../shared/timm/``
beside a checkout of this project (the copy this project's machines provide offline), or
downloaded into the cache from the git tag matching the installed timm. Without any of these it
stops with a message saying how to get it. Every flag of train.py keeps working, including ``--config`` and torchrun.

The path without this wrapper: ``python train.py --device-modules timm_odevit ...`` (train.py
imports the listed modules at start, which registers the models).
"""
import argparse
import difflib
import importlib.util
import json
import os
import pathlib
import platform
import re
import sys
import time
import types
import urllib.request
from typing import List, Optional

import timm

RAW_URL = 'https://raw.githubusercontent.com/huggingface/pytorch-image-models/v{version}/{script}'


# a source checkout (editable install) sits beside ../shared/timm on this project's machines
SHARED_SCRIPTS_DIR = pathlib.Path(__file__).resolve().parents[2] / 'shared' / 'timm'


def cache_dir() -> pathlib.Path:
    root = os.environ.get('TIMM_ODEVIT_CACHE') or pathlib.Path.home() / '.cache' / 'timm_odevit'
    return pathlib.Path(root) / f'timm-{timm.__version__}'


def locate_script(script: str = 'train.py', explicit: Optional[str] = None, download: bool = True) -> pathlib.Path:
    """Find timm's ``train.py`` or ``validate.py`` (see module docstring for the search order)."""
    if explicit:
        path = pathlib.Path(explicit)
        path = path if path.name == script else path.with_name(script)
        if not path.is_file():
            raise FileNotFoundError(f'timm {script} not found at {path}')
        return path
    candidates = []
    env_train = os.environ.get('TIMM_TRAIN_PY')
    if script == 'validate.py' and os.environ.get('TIMM_VALIDATE_PY'):
        candidates.append(pathlib.Path(os.environ['TIMM_VALIDATE_PY']))
    if env_train:
        candidates.append(pathlib.Path(env_train).with_name(script))
    cached = cache_dir() / script
    candidates += [cached, SHARED_SCRIPTS_DIR / script]
    for path in candidates:
        if path.is_file():
            return path
    if env_train:
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


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    """timm_odevit's flags, added to train.py's own parser (and its --config YAML keys)."""
    for action in parser._actions:
        if '--kd-distill-type' in action.option_strings and 'trajectory' not in action.choices:
            action.choices = list(action.choices) + ['trajectory']
            action.help = (action.help or '') + " 'trajectory': timm_odevit trajectory distillation."
    group = parser.add_argument_group('timm_odevit trajectory distillation (--kd-distill-type trajectory)')
    group.add_argument('--kd-teacher-checkpoint', default=None, type=str,
                       help='local checkpoint file for the --kd-model-name architecture')
    group.add_argument('--kd-mapping', default='uniform', choices=['uniform', 'arclength', 'softmax'],
                       help='teacher block -> student time point mapping')
    group.add_argument('--kd-mapping-temperature', default=30., type=float, help='T of the softmax mapping')
    group.add_argument('--kd-tokens', default='cls', choices=['cls', 'all'], help='tokens aligned per time point')
    group.add_argument('--kd-ce-start-epoch', default=0, type=int, help='epoch from which the CE loss is on')
    group.add_argument('--kd-attn-mass-weight', default=0., type=float,
                       help='weight of the [CLS] attention-mass L1 (last teacher block vs last student step)')
    group.add_argument('--kd-jasmin-weight', default=0., type=float, help='weight of the JaSMin regulariser')
    group.add_argument('--kd-jasmin-k', default=2, type=int, help='JaSMin k (reference: 2 distillation, 10 free)')
    group.add_argument('--kd-init-student', action='store_true', default=False,
                       help="copy the teacher's patch embedding, [CLS], pos embedding (frozen) and head")


def _install_tasks(module) -> None:
    """Route train.py's task construction to timm_odevit's tasks where they apply."""
    from timm.utils import unwrap_model
    from timm_odevit.tasks import DeepSupervisionTask, TrajectoryDistillationTask
    original_parse, classification = module._parse_args, module.ClassificationTask
    state = {}

    def parse_args():
        args, args_text = original_parse()
        if args.kd_distill_type == 'trajectory':
            if not args.kd_model_name:
                raise SystemExit('error: --kd-distill-type trajectory needs --kd-model-name (the teacher)')
            args.kd_distill_type = 'feature'  # train.py's branch that builds FeatureDistillationTask
            state['trajectory'] = args
        return args, args_text

    def classification_task(model, criterion=None, **kwargs):
        inner = unwrap_model(model)
        if len(getattr(inner, 'stages', ())) > 1:
            return DeepSupervisionTask(model, criterion=criterion, **kwargs)
        return classification(model, criterion=criterion, **kwargs)

    def feature_task(student_model, teacher_model, criterion=None, distill_loss_weight=None, task_loss_weight=None,
                     device=None, dtype=None, verbose=True, **feature_kwargs):
        args = state.get('trajectory')
        if args is None:
            return feature_distillation(
                student_model=student_model, teacher_model=teacher_model, criterion=criterion,
                distill_loss_weight=distill_loss_weight, task_loss_weight=task_loss_weight,
                device=device, dtype=dtype, verbose=verbose, **feature_kwargs)
        return TrajectoryDistillationTask(
            student_model, teacher_model, criterion=criterion, teacher_checkpoint=args.kd_teacher_checkpoint,
            mapping=args.kd_mapping, mapping_temperature=args.kd_mapping_temperature, tokens=args.kd_tokens,
            distill_loss_weight=distill_loss_weight, task_loss_weight=task_loss_weight,
            ce_start_epoch=args.kd_ce_start_epoch, init_student_from_teacher=args.kd_init_student,
            attn_mass_weight=args.kd_attn_mass_weight, jasmin_weight=args.kd_jasmin_weight,
            jasmin_k=args.kd_jasmin_k, device=device, dtype=dtype, verbose=verbose)

    feature_distillation = module.FeatureDistillationTask
    module._parse_args = parse_args
    module.ClassificationTask = classification_task
    module.FeatureDistillationTask = feature_task


_CLOCK = {'last': time.time()}


def hardware() -> str:
    """The machine in words: CPU model and threads, or the GPU."""
    import torch
    if torch.cuda.is_available():
        return f'{torch.cuda.device_count()}x {torch.cuda.get_device_name()}'
    name = platform.processor() or platform.machine()
    try:
        with open('/proc/cpuinfo') as f:
            name = next(line.split(':', 1)[1].strip() for line in f if line.startswith('model name'))
    except (OSError, StopIteration):
        pass
    return f'{name}, {os.cpu_count()} CPU cores, {torch.get_num_threads()} threads'


def record_train_time(output_dir: pathlib.Path, epoch: int) -> None:
    """Add the wall time since the previous epoch's end (or the process start) to
    ``train_time.json`` in the run's folder: the total across ``--resume`` runs, per epoch.
    (Time spent in an epoch that a kill interrupted is not counted.)"""
    now = time.time()
    path = output_dir / 'train_time.json'
    record = json.loads(path.read_text()) if path.is_file() else {'epochs': {}}
    record['epochs'][str(epoch)] = round(now - _CLOCK['last'], 1)
    record['seconds'] = round(sum(record['epochs'].values()), 1)
    record['hardware'] = hardware()
    path.write_text(json.dumps(record, indent=1))
    _CLOCK['last'] = now


def _continuous_summary(module) -> None:
    """Keep ``summary.csv`` one table across ``--resume``: train.py writes a header whenever its
    best metric is unset (so again after a resume), and a run killed between writing an epoch's row
    and saving its checkpoint repeats that epoch. Rows of the epochs being (re)run are dropped, and
    the header is written only into a new file."""
    import csv
    from timm import utils
    update_summary = utils.update_summary

    def continuous_update_summary(epoch, train_metrics, eval_metrics, filename, lr=None, write_header=None,
                                  log_wandb=False):
        path = pathlib.Path(filename)
        if path.is_file() and path.stat().st_size:
            with open(path, newline='') as f:
                rows = list(csv.DictReader(f))
            kept = [r for r in rows if int(r['epoch']) < epoch]
            if len(kept) < len(rows):
                with open(path, 'w', newline='') as f:
                    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
                    writer.writeheader()
                    writer.writerows(kept)
        update_summary(epoch, train_metrics, eval_metrics, filename, lr=lr, write_header=None, log_wandb=log_wandb)
        record_train_time(path.parent, epoch)

    module.utils = types.SimpleNamespace(**{**vars(utils), 'update_summary': continuous_update_summary})


def _check_image_folder(rest: List[str]) -> None:
    """Fail early and clearly when an ImageFolder --data-dir holds no images."""
    probe = argparse.ArgumentParser(add_help=False)
    probe.add_argument('--data-dir', '--data_dir', default=None)
    probe.add_argument('--dataset', '-d', default='')
    probe.add_argument('--train-split', default='train')
    known, _ = probe.parse_known_args(rest)
    if not known.data_dir or known.dataset:
        return
    root = pathlib.Path(known.data_dir)
    split = root / known.train_split
    search = split if split.is_dir() else root
    exts = {'.png', '.jpg', '.jpeg', '.bmp', '.webp', '.gif', '.tif', '.tiff'}
    if not root.exists():
        raise SystemExit(f'error: --data-dir {root} does not exist')
    if not any(p.suffix.lower() in exts for p in search.rglob('*')):
        raise SystemExit(f'error: no images under {search} (expected an ImageFolder: {search}/<class>/<image>)')


def _option(rest: List[str], flag: str, config_path: Optional[str]):
    """The value train.py will use for ``flag``: the command line's, else the ``--config`` YAML's, else None."""
    key = flag.lstrip('-').replace('-', '_')
    probe = argparse.ArgumentParser(add_help=False)
    probe.add_argument(flag, dest=key, default=None)
    value = probe.parse_known_args(rest)[0].__dict__[key]
    if value is None and config_path:
        import yaml
        value = (yaml.safe_load(pathlib.Path(config_path).read_text()) or {}).get(key)
    return value


def check_auto_augment(aa: Optional[str]) -> None:
    """Fail before training when timm's RandAugment string ``aa`` can posterize an image to 0 bits.

    With ``inc1`` (DeiT's ``rand-m9-mstd0.5-inc1``) timm maps magnitude level 10 to "keep 0 bits", and
    magnitude noise (``mstd``) reaches it; recent Pillow (13 here) raises ValueError for 0 bits, so such a run
    crashes in its data loader after a few hundred images. Capping the magnitude (``-mmax9``) avoids it.
    """
    if not aa or not aa.startswith('rand'):
        return
    opts = dict(re.split(r'(\d.*)', part)[:2] for part in aa.split('-')[1:] if re.search(r'\d', part))  # as timm parses
    if opts.get('inc') != '1':
        return
    m, mstd, upper = float(opts.get('m', 10)), float(opts.get('mstd', 0)), float(opts.get('mmax', 10))
    highest = upper if 0 < mstd <= 100 else min(m, upper)  # timm: gaussian noise clipped to mmax; mstd > 100 uniform
    if highest < 10:
        return
    import PIL
    from PIL import Image, ImageOps
    try:
        ImageOps.posterize(Image.new('RGB', (1, 1)), 0)
    except ValueError:
        raise SystemExit(f'error: --aa {aa} can posterize to 0 bits (timm maps inc1 magnitude 10 to 0 bits), which '
                         f'the installed Pillow {PIL.__version__} rejects mid-epoch; cap the magnitude: --aa {aa}-mmax9')


def check_config_keys(parser: argparse.ArgumentParser, path) -> None:
    """Raise SystemExit naming the keys of the ``--config`` YAML file at ``path`` that are not
    options of ``parser`` (train.py would ignore them silently and train with the defaults).

    The known keys are the ``dest`` of the parser's actions (``model_kwargs`` for ``--model-kwargs``).
    """
    import yaml
    try:
        cfg = yaml.safe_load(pathlib.Path(path).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise SystemExit(f'error: cannot read --config {path}: {e}')
    if not isinstance(cfg, dict):
        raise SystemExit(f'error: --config {path} must be a YAML mapping of option: value, '
                         f'got {type(cfg).__name__}')
    known = {a.dest for a in parser._actions if a.dest != argparse.SUPPRESS}
    unknown = [k for k in cfg if k not in known]
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(str(key).replace('-', '_'), known, n=1)
            hints.append(f'{key!r}' + (f' (did you mean {close[0]!r}?)' if close else ''))
        raise SystemExit(f'error: unknown key(s) in --config {path}: {", ".join(hints)}. Keys are train.py option '
                         'names with underscores (--model-kwargs -> model_kwargs); see train.py --help')


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
    if not ours.validate:
        _add_arguments(module.parser)
        _install_tasks(module)
        _continuous_summary(module)
        _check_image_folder(rest)
        config, _ = module.config_parser.parse_known_args(rest)
        if config.config:
            check_config_keys(module.parser, config.config)
        check_auto_augment(_option(rest, '--aa', config.config))
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
