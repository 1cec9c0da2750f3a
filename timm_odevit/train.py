"""Run timm's own train.py / validate.py / inference.py / benchmark.py with timm_odevit's models registered.

    python -m timm_odevit.train [--timm-train PATH] TRAIN_PY_ARGS...
    python -m timm_odevit.train --validate [--timm-train PATH] VALIDATE_PY_ARGS...     (odevit-validate)
    python -m timm_odevit.train --script inference.py INFERENCE_PY_ARGS...             (odevit-inference)
    python -m timm_odevit.train --script benchmark.py BENCHMARK_PY_ARGS...             (odevit-benchmark)

timm's train.py is not in the timm wheel. It is found, in order, at ``--timm-train PATH``, at
``$TIMM_TRAIN_PY`` (validate.py is looked for beside it, or at ``$TIMM_VALIDATE_PY``), in the
cache (``$TIMM_ODEVIT_CACHE`` or ~/.cache/timm_odevit/timm-<version>/), in ``../shared/timm/``
beside a checkout of this project (the copy this project's machines provide offline), or
downloaded into the cache from the git tag matching the installed timm. Without any of these it
stops with a message saying how to get it (the other scripts: the same places). Every flag of train.py keeps
working, including ``--config`` and torchrun; the other scripts get their own flags unchanged (and ``--device cpu``
when there is no GPU, as train.py does).

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
from timm.data.readers.img_extensions import get_img_extensions

from ._checks import check_dict, is_int, is_real, read_json, read_yaml, write_atomic
from ._compat import parser_actions, replace_train_parse_args

RAW_URL = 'https://raw.githubusercontent.com/huggingface/pytorch-image-models/v{version}/{script}'


# a source checkout (editable install) sits beside ../shared/timm on this project's machines
SHARED_SCRIPTS_DIR = pathlib.Path(__file__).resolve().parents[2] / 'shared' / 'timm'


def cache_dir() -> pathlib.Path:
    root = os.environ.get('TIMM_ODEVIT_CACHE') or pathlib.Path.home() / '.cache' / 'timm_odevit'
    return pathlib.Path(root) / f'timm-{timm.__version__}'


def locate_script(
    script: str = 'train.py', explicit: Optional[str] = None, download: bool = True
) -> pathlib.Path:
    """Find one of timm's scripts (:data:`SCRIPTS`; see module docstring for the search order)."""
    if explicit:
        path = pathlib.Path(explicit).with_name(script)
        if not path.is_file():
            raise FileNotFoundError(f'timm {script} not found at {path}')
        return path
    env_train = os.environ.get('TIMM_TRAIN_PY')
    cached = cache_dir() / script
    env_paths = [os.environ.get('TIMM_VALIDATE_PY') if script == 'validate.py' else None,
                 env_train and pathlib.Path(env_train).with_name(script)]
    candidates = [pathlib.Path(p) for p in env_paths if p] + [cached, SHARED_SCRIPTS_DIR / script]
    for path in candidates:
        if path.is_file():
            return path
    if env_train:
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


# timm's scripts this wrapper runs
SCRIPTS = ('train.py', 'validate.py', 'inference.py', 'benchmark.py')


def load_script(path: pathlib.Path):
    """Import one of timm's scripts as a module (its main() is not run); a package it needs and this environment
    lacks (inference.py: pandas) is named."""
    spec = importlib.util.spec_from_file_location(f'timm_{path.stem}_script', path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except ModuleNotFoundError as e:
        raise SystemExit(
            f'error: timm\'s {path.name} needs the package {e.name!r}, which is not installed '
            f'(pip install {e.name}); timm_odevit itself does not need it'
        ) from e
    return module


# the trajectory-distillation flags (--kd-distill-type trajectory): their add_argument keywords
KD_FLAGS = {
    'kd_teacher_checkpoint': dict(
        default=None,
        type=str,
        help="the teacher's checkpoint file, read weights_only: "
        'a train.py checkpoint of --kd-model-name (rebuilt with its own --model-kwargs; the '
        'weights its run selected on, EMA with --model-ema) or a state dict of it',
    ),
    'kd_model_kwargs': dict(
        nargs='*',
        default={},
        action='kwargs',
        help='kwargs of the teacher --kd-model-name (over those of a train.py teacher checkpoint)',
    ),
    'kd_mapping': dict(
        default='uniform',
        choices=['uniform', 'arclength', 'softmax'],
        help='teacher block -> student time point mapping',
    ),
    'kd_mapping_temperature': dict(default=30.0, type=float, help='T of the softmax mapping'),
    'kd_tokens': dict(default='cls', choices=['cls', 'all'], help='tokens aligned per time point'),
    'kd_ce_start_epoch': dict(default=0, type=int, help='epoch from which the CE loss is on'),
    'kd_attn_mass_weight': dict(
        default=0.0,
        type=float,
        help='weight of the [CLS] attention-mass L1 (last teacher block vs last student step)',
    ),
    'kd_jasmin_weight': dict(default=0.0, type=float, help='weight of the JaSMin regulariser'),
    'kd_jasmin_k': dict(default=2, type=int, help='JaSMin k (reference: 2 distillation, 10 free)'),
    'kd_init_student': dict(
        action='store_true',
        default=False,
        help="copy the teacher's patch embedding, [CLS], pos embedding (frozen) and head",
    ),
}
TRAJECTORY_DEFAULTS = {k: kw['default'] for k, kw in KD_FLAGS.items()}  # the flags' defaults
KD_TASK_NAMES = {
    'kd_model_kwargs': 'teacher_model_kwargs',
    'kd_init_student': 'init_student_from_teacher',
}


def _wrapper_parser(add_help: bool = False) -> argparse.ArgumentParser:
    """The wrapper's own flags (read before train.py / validate.py parse the rest)."""
    parser = argparse.ArgumentParser(add_help=add_help, prog='odevit-train')
    _wrapper_flags(parser)
    return parser


def _wrapper_flags(parser) -> None:
    parser.add_argument(
        '--timm-train',
        default=None,
        metavar='PATH',
        help="path to timm's train.py (validate.py is found beside it); default: $TIMM_TRAIN_PY, the "
        'cache, ../shared/timm, or a download of the installed version',
    )
    parser.add_argument(
        '--validate', action='store_true', help="run timm's validate.py instead of train.py"
    )
    parser.add_argument('--script', default=None, choices=SCRIPTS,
                        help="run this timm script (found as train.py is) instead of train.py")


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    """timm_odevit's flags, added to train.py's own parser (and its --config YAML keys)."""
    from timm.utils import ParseKwargs
    for action in parser_actions(parser):
        if '--kd-distill-type' in action.option_strings and 'trajectory' not in action.choices:
            action.choices = list(action.choices) + ['trajectory']
            action.help = (
                action.help or ''
            ) + " 'trajectory': timm_odevit trajectory distillation."
    _wrapper_flags(
        parser.add_argument_group(
            'timm_odevit wrapper (python -m timm_odevit.train / odevit-train)'
        )
    )
    parser.register('action', 'kwargs', ParseKwargs)  # KD_FLAGS' name for it
    group = parser.add_argument_group(
        'timm_odevit trajectory distillation (--kd-distill-type trajectory)'
    )
    for key, kwargs in KD_FLAGS.items():
        group.add_argument('--' + key.replace('_', '-'), **kwargs)


def uses_deep_supervision(model) -> bool:
    """Whether train.py's classification task becomes :class:`DeepSupervisionTask`: only for this package's
    staged models (a bViT with ``stages``); every other timm model trains exactly as timm's train.py trains it."""
    return len(getattr(_own_model(model), 'stages', ()) or ()) > 1


def check_distillation_args(args) -> None:
    """SystemExit for trajectory-distillation flags that would be ignored or cannot work."""
    trajectory = args.kd_distill_type == 'trajectory'
    if trajectory and not args.kd_model_name:
        raise SystemExit('error: --kd-distill-type trajectory needs --kd-model-name (the teacher)')
    if not trajectory:
        given = [f'--{k.replace("_", "-")}' for k, default in TRAJECTORY_DEFAULTS.items()
                 if getattr(args, k, default) != default]
        if given:
            raise SystemExit(
                f'error: {", ".join(given)} appl{"ies" if len(given) == 1 else "y"} to --kd-distill-type '
                f'trajectory (got {args.kd_distill_type}): add --kd-distill-type trajectory, or drop them'
            )


def _install_tasks(module) -> None:
    """Route train.py's task construction to timm_odevit's tasks where they apply."""
    from timm_odevit.tasks import DeepSupervisionTask, TrajectoryDistillationTask
    classification = module.ClassificationTask
    state = {}

    def parse_args():
        args, args_text = original_parse()
        check_distillation_args(args)
        if args.kd_distill_type == 'trajectory':
            # train.py's branch that builds FeatureDistillationTask ...
            args.kd_distill_type = 'feature'
            state['trajectory'] = args
        return args, args_text

    def classification_task(model, criterion=None, **kwargs):
        if uses_deep_supervision(model):
            return DeepSupervisionTask(model, criterion=criterion, **kwargs)
        return classification(model, criterion=criterion, **kwargs)

    def feature_task(student_model, teacher_model, **kwargs):
        args = state.get('trajectory')
        if args is None:
            return feature_distillation(
                student_model=student_model, teacher_model=teacher_model, **kwargs
            )
        # ... and the args train.py saves in its checkpoints say what ran
        args.kd_distill_type = 'trajectory'
        common = (
            'criterion',
            'distill_loss_weight',
            'task_loss_weight',
            'device',
            'dtype',
            'verbose',
        )
        # the task's names for the flags
        flags = {KD_TASK_NAMES.get(k, k[3:]): getattr(args, k) for k in KD_FLAGS}
        # the data loader's normalisation
        flags.update({k: getattr(args, k, None) for k in ('mean', 'std')})
        flags.update({k: kwargs[k] for k in common if k in kwargs})
        return TrajectoryDistillationTask(student_model, teacher_model, **flags)

    feature_distillation = module.FeatureDistillationTask
    original_parse = replace_train_parse_args(module, parse_args)  # the one parse_args calls
    module.ClassificationTask = classification_task
    module.FeatureDistillationTask = feature_task


def _own_model(model):
    """The bare (unwrapped) model when it is one of this package's (else None: timm's code runs as it is)."""
    from timm.utils import unwrap_model
    from timm_odevit.models import ContinuousDepthViT
    model = unwrap_model(model)
    return model if isinstance(model, ContinuousDepthViT) else None


def checked_resume(original, ema: bool = False):
    """train.py's ``resume_task_checkpoint`` / ``load_task_ema_checkpoint`` for this package's models: the file is
    read weights_only with errors naming it, and its weights (the keys timm's function takes) are checked against
    the model, missing / unexpected / mis-shaped keys named, before timm's function restores them."""
    from timm.models import clean_state_dict
    from timm_odevit.hub import load_checkpoint_file
    from timm_odevit.models._checkpoint import check_state_dict

    def resume(task, checkpoint_path, *args, **kwargs):
        model = _own_model(task.get_eval_model())
        if model is None:
            return original(task, checkpoint_path, *args, **kwargs)
        try:
            ckpt = load_checkpoint_file(checkpoint_path, '--resume checkpoint')
            keys = (
                ('state_dict_ema', 'model_ema', 'state_dict', 'model')
                if ema
                else ('state_dict', 'model')
            )
            state = next(
                (ckpt[k] for k in keys if isinstance(ckpt, dict) and isinstance(ckpt.get(k), dict)),
                ckpt,
            )
            if not isinstance(state, dict):
                raise ValueError(
                    f'--resume {checkpoint_path!r} holds no state dict: give a train.py checkpoint'
                )
            check_state_dict(
                model, clean_state_dict(state), source=f'--resume checkpoint {checkpoint_path}'
            )
        except (ValueError, OSError) as e:
            raise SystemExit(f'error: {e}') from None
        return original(task, checkpoint_path, *args, **kwargs)
    return resume


def checked_create_model(create):
    """train.py's ``create_model`` whose ``checkpoint_path`` (--initial-checkpoint) is loaded, for this package's
    models, by the package: read weights_only with errors naming the file, through the models' checkpoint filter
    (train.py / DDP / torch.compile wrappers unwrapped, position embedding resampled), strictly; a config.json beside
    the file that runs the weights at another depth is warned about."""
    def create_model(name, *args, checkpoint_path=None, **kwargs):
        from timm_odevit.hub import depth_mismatch, load_checkpoint_file
        from timm_odevit.models import ContinuousDepthViT, checkpoint_filter_fn
        from timm_odevit.models._checkpoint import check_state_dict
        model = create(name, *args, **kwargs)
        if not checkpoint_path:
            return model
        if not isinstance(model, ContinuousDepthViT):
            from timm.models import load_checkpoint
            load_checkpoint(model, checkpoint_path)  # what timm's create_model does with it
            return model
        try:
            state = checkpoint_filter_fn(
                load_checkpoint_file(checkpoint_path, '--initial-checkpoint'), model
            )
            check_state_dict(model, state, source=f'--initial-checkpoint {checkpoint_path}')
        except (ValueError, KeyError, OSError) as e:
            raise SystemExit(f'error: {e}') from None
        model.load_state_dict(state)
        _warn(depth_mismatch(model, checkpoint_path))
        return model
    return create_model


def _warn(warning: str) -> None:
    if warning:
        print(warning, file=sys.stderr)


def checked_load_checkpoint(load):
    """validate.py's ``load_checkpoint`` (--checkpoint), which also warns when the config.json beside the weights
    runs them on another grid than the model (:func:`timm_odevit.hub.depth_mismatch`)."""
    def load_checkpoint(model, checkpoint_path, *args, **kwargs):
        from timm_odevit.hub import depth_mismatch
        out = load(model, checkpoint_path, *args, **kwargs)
        _warn(depth_mismatch(model, checkpoint_path))
        return out
    return load_checkpoint


def _install_checkpoint_checks(module) -> None:
    module.resume_task_checkpoint = checked_resume(module.resume_task_checkpoint)
    module.load_task_ema_checkpoint = checked_resume(module.load_task_ema_checkpoint, ema=True)
    module.create_model = checked_create_model(module.create_model)


_CLOCK = {'last': time.time()}


def hardware() -> str:
    """The machine in words: CPU model and threads, or the GPU."""
    import torch
    if torch.cuda.is_available():
        return f'{torch.cuda.device_count()}x {torch.cuda.get_device_name()}'
    name = platform.processor() or platform.machine()
    try:
        with open('/proc/cpuinfo') as f:
            name = next(
                line.split(':', 1)[1].strip() for line in f if line.startswith('model name')
            )
    except (OSError, StopIteration):
        pass
    return f'{name}, {os.cpu_count()} CPU cores, {torch.get_num_threads()} threads'


def record_train_time(output_dir: pathlib.Path, epoch: int) -> None:
    """Add the wall time since the previous epoch's end (or the process start) to
    ``train_time.json`` in the run's folder: the total across ``--resume`` runs, per epoch, and each epoch's machine
    (``epoch_hardware``; ``hardware`` names every machine the epochs ran on, as a resume may change the threads). (Time
    spent in an epoch that a kill interrupted is not counted.)"""
    now = time.time()
    path = output_dir / 'train_time.json'
    record = read_json(path) if path.is_file() else {'epochs': {}}
    if not isinstance(record.get('epochs'), dict):
        raise ValueError(
            f'{path} has no "epochs" table: restore it or move it away to start a new record'
        )
    record['epochs'][str(epoch)] = round(now - _CLOCK['last'], 1)
    record.setdefault('epoch_hardware', {})[str(epoch)] = hardware()
    record['seconds'] = round(sum(record['epochs'].values()), 1)
    # every epoch's, in order
    record['hardware'] = ' / '.join(dict.fromkeys(record['epoch_hardware'].values()))
    write_atomic(path, json.dumps(record, indent=1))
    _CLOCK['last'] = now


def _continuous_summary(module) -> None:
    """Keep ``summary.csv`` one table across ``--resume``: train.py writes a header whenever its
    best metric is unset (so again after a resume), and a run killed between writing an epoch's row
    and saving its checkpoint repeats that epoch. Rows of the epochs being (re)run are dropped, and
    the header is written only into a new file."""
    import csv
    import io
    from timm import utils
    update_summary = utils.update_summary

    def continuous_update_summary(
        epoch, train_metrics, eval_metrics, filename, lr=None, write_header=None, log_wandb=False
    ):
        path = pathlib.Path(filename)
        if path.is_file() and path.stat().st_size:
            with open(path, newline='') as f:
                rows = list(csv.DictReader(f))
            kept = [r for r in rows if int(r['epoch']) < epoch]
            # rewritten whole: an interruption leaves the old table, not its header only
            if len(kept) < len(rows):
                text = io.StringIO()
                writer = csv.DictWriter(text, fieldnames=list(rows[0]))
                writer.writeheader()
                writer.writerows(kept)
                write_atomic(path, text.getvalue())
        update_summary(
            epoch,
            train_metrics,
            eval_metrics,
            filename,
            lr=lr,
            write_header=None,
            log_wandb=log_wandb,
        )
        record_train_time(path.parent, epoch)

    module.utils = types.SimpleNamespace(
        **{**vars(utils), 'update_summary': continuous_update_summary}
    )


def _check_image_folder(rest: List[str], config_path: Optional[str] = None) -> None:
    """Fail early and clearly when an ImageFolder --data-dir holds no images (the options as train.py will
    see them: the command line's, else the --config YAML's)."""
    data_dir = _option(rest, '--data-dir', config_path, aliases=('--data_dir',))
    dataset = _option(rest, '--dataset', config_path, aliases=('-d',))
    split_name = _option(rest, '--train-split', config_path) or 'train'
    if not data_dir or dataset:
        return
    root = pathlib.Path(data_dir)
    split = root / split_name
    search = split if split.is_dir() else root
    exts = get_img_extensions(as_set=True)  # those timm's ImageFolder reader reads
    if not root.exists():
        raise SystemExit(f'error: --data-dir {root} does not exist')
    if not any(p.suffix.lower() in exts for p in search.rglob('*')):
        raise SystemExit(
            f'error: no images under {search}: expected <class>/<image> files ({", ".join(sorted(exts))})'
        )


def _option(rest: List[str], flag: str, config_path: Optional[str], aliases: tuple = ()):
    """The value train.py will use for ``flag``: the command line's, else the ``--config`` YAML's, else None."""
    key = flag.lstrip('-').replace('-', '_')
    probe = argparse.ArgumentParser(add_help=False)
    probe.add_argument(flag, *aliases, dest=key, default=None)
    value = getattr(probe.parse_known_args(rest)[0], key)
    if value is None and config_path:
        try:
            value = read_yaml(config_path).get(key)
        except ValueError:
            return None  # check_config_keys reports an unreadable config
    return value


def check_auto_augment(aa: Optional[str]) -> None:
    """Fail before training when timm's RandAugment string ``aa`` can posterize an image to 0 bits.

    With ``inc1`` (DeiT's ``rand-m9-mstd0.5-inc1``) timm maps magnitude level 10 to "keep 0 bits", and
    magnitude noise (``mstd``) reaches it; recent Pillow (13 here) raises ValueError for 0 bits, so such a run
    crashes in its data loader after a few hundred images. Capping the magnitude (``-mmax9``) avoids it.
    """
    if not aa or not aa.startswith('rand'):
        return
    opts = dict(
        re.split(r'(\d.*)', part)[:2] for part in aa.split('-')[1:] if re.search(r'\d', part)
    )  # as timm parses
    if opts.get('inc') != '1':
        return
    m = float(opts.get('m', 10))
    mstd = float(opts.get('mstd', 0))
    upper = float(opts.get('mmax', 10))
    # timm: gaussian noise clipped to mmax; mstd > 100 uniform
    highest = upper if 0 < mstd <= 100 else min(m, upper)
    if highest < 10:
        return
    import PIL
    from PIL import Image, ImageOps
    try:
        ImageOps.posterize(Image.new('RGB', (1, 1)), 0)
    except ValueError:
        raise SystemExit(
            f'error: --aa {aa} can posterize to 0 bits (timm maps inc1 magnitude 10 to 0 bits), which '
            f'the installed Pillow {PIL.__version__} rejects mid-epoch; cap the magnitude: --aa {aa}-mmax9'
        )


KWARGS_KEYS = ('model_kwargs', 'kd_model_kwargs')  # train.py passes them on as **kwargs


def read_train_config(path, what: str = '') -> dict:
    """A train.py ``--config`` YAML file; ValueError naming the file (``what``: how the user gave it, e.g. '--config ';
    the line of a syntax error) or the key whose value train.py cannot take: :data:`KWARGS_KEYS` must be mappings,
    :data:`KD_FLAGS` values of their type (a string converted as argparse converts it)."""
    cfg = read_yaml(path, what)
    for key in KWARGS_KEYS:
        if cfg.get(key) is not None:
            cfg[key] = check_dict(f'{what}{path}: {key}', cfg[key])
    for key, spec in KD_FLAGS.items():
        kind = spec.get('type')
        value = cfg.get(key)
        if kind not in (int, float) or value is None:
            continue
        try:
            value = kind(value) if isinstance(value, str) else value
        except ValueError:
            pass
        if not (is_int(value) if kind is int else is_real(value)):
            kind_name = 'an integer' if kind is int else 'a number'
            raise ValueError(f'{what}{path}: {key} must be {kind_name}, got {cfg[key]!r}')
        cfg[key] = value
    return cfg


def check_model_sources(rest: List[str], config_path: Optional[str] = None) -> None:
    """SystemExit naming the file when --model or --kd-model-name (the command line's, else the config's) is a
    ``local-dir:`` folder whose config.json builds no model (:func:`timm_odevit.hub.check_model_source`)."""
    from timm_odevit.hub import check_model_source
    for flag, aliases in (('--model', ('-m',)), ('--kd-model-name', ())):
        try:
            check_model_source(_option(rest, flag, config_path, aliases))
        except ValueError as e:
            raise SystemExit(f'error: {flag}: {e}')


def check_config_keys(parser: argparse.ArgumentParser, path) -> None:
    """Raise SystemExit naming the ``--config`` YAML file at ``path`` when it cannot be read (:func:`read_train_config`)
    or has keys that are not options of ``parser`` (train.py would ignore them silently and train with the defaults).

    The known keys are the ``dest`` of the parser's actions (``model_kwargs`` for ``--model-kwargs``).
    """
    try:
        cfg = read_train_config(path, '--config ')
    except ValueError as e:
        raise SystemExit(f'error: {e}')
    known = {a.dest for a in parser_actions(parser) if a.dest != argparse.SUPPRESS}
    close = {
        k: difflib.get_close_matches(str(k).replace('-', '_'), known, n=1)
        for k in cfg
        if k not in known
    }
    if close:
        hints = [f'{k!r}' + (f' (did you mean {c[0]!r}?)' if c else '') for k, c in close.items()]
        raise SystemExit(
            f'error: unknown key(s) in --config {path}: {", ".join(hints)}. Keys are train.py option '
            'names with underscores (--model-kwargs -> model_kwargs); see train.py --help'
        )


def main(argv: Optional[List[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    ours, rest = _wrapper_parser().parse_known_args(argv)
    import timm_odevit  # noqa: F401  (registers the models)

    if ours.validate and ours.script not in (None, 'validate.py'):
        raise SystemExit(
            f'error: --validate runs validate.py, --script {ours.script} another script: give one'
        )
    script = 'validate.py' if ours.validate else ours.script or 'train.py'
    try:
        path = locate_script(script, ours.timm_train)
    except FileNotFoundError as e:
        if '-h' in rest or '--help' in rest:
            _wrapper_parser(add_help=True).print_help()
        raise SystemExit(f'error: {e}')
    module = load_script(path)
    config_path = None
    if script != 'train.py':
        if hasattr(module, 'parser'):
            _wrapper_flags(
                module.parser.add_argument_group(f'timm_odevit wrapper (odevit-{path.stem})')
            )
        # the script's own name for timm's function; timm is untouched
        if hasattr(module, 'load_checkpoint'):
            module.load_checkpoint = checked_load_checkpoint(module.load_checkpoint)
    else:
        _add_arguments(module.parser)
        _install_tasks(module)
        _install_checkpoint_checks(module)
        _continuous_summary(module)
        config_path = module.config_parser.parse_known_args(rest)[0].config
        if config_path:
            check_config_keys(module.parser, config_path)
        _check_image_folder(rest, config_path)
        check_auto_augment(_option(rest, '--aa', config_path))
    check_model_sources(rest, config_path)
    if not any(a == '--device' or a.startswith('--device=') for a in rest):
        import torch
        # train.py defaults to cuda; run on the CPU instead of failing
        if not torch.cuda.is_available():
            rest = rest + ['--device', 'cpu']
    sys.argv = [str(path)] + rest
    module.main()


def validate_main() -> None:
    main(['--validate'] + sys.argv[1:])


def inference_main() -> None:
    main(['--script', 'inference.py'] + sys.argv[1:])


def benchmark_main() -> None:
    main(['--script', 'benchmark.py'] + sys.argv[1:])


if __name__ == '__main__':
    main()
