"""Run timm's own train.py / validate.py / inference.py / benchmark.py with timm_odevit's models registered.

    python -m timm_odevit.train [--timm-train PATH] TRAIN_PY_ARGS...                   (odevit-train)
    python -m timm_odevit.train --validate [--timm-train PATH] VALIDATE_PY_ARGS...     (odevit-validate)
    python -m timm_odevit.train --script inference.py INFERENCE_PY_ARGS...             (odevit-inference)
    python -m timm_odevit.train --script benchmark.py BENCHMARK_PY_ARGS...             (odevit-benchmark)

The scripts are found as :mod:`timm_odevit.cli.scripts` says. train.py gains ``--kd-distill-type trajectory``
(:class:`~timm_odevit.tasks.TrajectoryDistillationTask`) and trains staged bViTs with
:class:`~timm_odevit.tasks.DeepSupervisionTask`; every other flag and model runs as timm runs it (torchrun
included). Without CUDA the scripts get ``--device cpu``.

Without this wrapper: ``python train.py --device-modules timm_odevit ...`` (the models, not the tasks).
"""
import argparse
import difflib
import functools
import sys
from typing import Callable, List, Optional

from timm.utils import ParseKwargs

from .._checks import read_yaml
from .._compat import parser_actions, replace_train_parse_args
from .scripts import SCRIPTS, load_script, locate_script

# the trajectory-distillation flags (--kd-distill-type trajectory): their add_argument keywords
KD_FLAGS = {
    'kd_teacher_checkpoint': dict(
        default=None,
        help="the teacher's checkpoint file, read weights_only: a train.py checkpoint of "
        '--kd-model-name (rebuilt with its own --model-kwargs; the weights its run selected on, '
        'EMA with --model-ema) or a state dict of it',
    ),
    'kd_model_kwargs': dict(
        nargs='*',
        default={},
        action=ParseKwargs,
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
TRAJECTORY_DEFAULTS = {k: kw['default'] for k, kw in KD_FLAGS.items()}
# TrajectoryDistillationTask's names for the flags that are not the flag without its 'kd_'
KD_TASK_NAMES = {
    'kd_model_kwargs': 'teacher_model_kwargs',
    'kd_init_student': 'init_student_from_teacher',
}


def _wrapper_flags(parser):
    """The wrapper's own flags, added to ``parser`` (an argparse parser or group), which is returned."""
    parser.add_argument(
        '--timm-train',
        metavar='PATH',
        help="path to timm's train.py (the other scripts are found beside it); default: "
        '$TIMM_TRAIN_PY, the cache, ../shared/timm, or a download of the installed version',
    )
    parser.add_argument(
        '--validate',
        action='store_true',
        help="run timm's validate.py instead of train.py",
    )
    parser.add_argument(
        '--script',
        choices=SCRIPTS,
        help='run this timm script (found as train.py is) instead of train.py',
    )
    return parser


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    """timm_odevit's flags, added to train.py's own parser (and so to its --config YAML keys)."""
    for action in parser_actions(parser):
        if '--kd-distill-type' in action.option_strings:
            action.choices = list(action.choices) + ['trajectory']
            action.help += " 'trajectory': timm_odevit's (flags below)."
    group = parser.add_argument_group('timm_odevit trajectory distillation')
    for key, kwargs in KD_FLAGS.items():
        group.add_argument('--' + key.replace('_', '-'), **kwargs)


def uses_deep_supervision(model) -> bool:
    """Whether train.py's classification task becomes :class:`DeepSupervisionTask`: only for this package's staged
    models (a bViT with ``stages``); every other timm model trains exactly as timm's train.py trains it."""
    from timm.utils import unwrap_model
    from timm_odevit.models import BViT
    model = unwrap_model(model)
    return isinstance(model, BViT) and len(model.stages) > 1


def check_distillation_args(args) -> None:
    """SystemExit for trajectory-distillation flags that would be ignored or cannot work."""
    trajectory = args.kd_distill_type == 'trajectory'
    if trajectory and not args.kd_model_name:
        raise SystemExit('error: --kd-distill-type trajectory needs --kd-model-name (the teacher)')
    given = [f'--{k.replace("_", "-")}' for k, default in TRAJECTORY_DEFAULTS.items()
             if getattr(args, k, default) != default]
    if given and not trajectory:
        verb = 'applies' if len(given) == 1 else 'apply'
        raise SystemExit(
            f'error: {", ".join(given)} {verb} to --kd-distill-type trajectory (got '
            f'{args.kd_distill_type}): add --kd-distill-type trajectory, or drop them'
        )


def check_model_sources(args) -> None:
    """SystemExit naming the file when ``args.model`` or ``args.kd_model_name`` is a ``local-dir:`` folder whose
    config.json builds no model (:func:`timm_odevit.checkpoint.check_model_source`; timm raises a bare KeyError there)."""
    from timm_odevit.checkpoint import check_model_source
    for key in ('model', 'kd_model_name'):
        try:
            check_model_source(getattr(args, key, None))
        except ValueError as e:
            raise SystemExit(f'error: --{key.replace("_", "-")}: {e}')


def check_config_keys(parser: argparse.ArgumentParser, path) -> None:
    """SystemExit naming the ``--config`` YAML file at ``path`` when it is not a readable mapping, or when it has
    keys that are no option ``dest`` of ``parser`` (train.py would ignore them and train with the defaults)."""
    try:
        cfg = read_yaml(path, '--config ')
    except ValueError as e:
        raise SystemExit(f'error: {e}')
    known = {a.dest for a in parser_actions(parser)}
    hints = []
    for key in cfg:
        if key not in known:
            close = difflib.get_close_matches(str(key).replace('-', '_'), known, n=1)
            hints.append(f'{key!r}' + (f' (did you mean {close[0]!r}?)' if close else ''))
    if hints:
        raise SystemExit(
            f'error: unknown key(s) in --config {path}: {", ".join(hints)}. Keys are train.py '
            'option names with underscores (--model-kwargs -> model_kwargs); see train.py --help'
        )


def _install_tasks(module) -> None:
    """Check train.py's arguments when it parses them, and route its task construction to timm_odevit's tasks
    where they apply."""
    from timm_odevit.tasks import DeepSupervisionTask
    classification = module.ClassificationTask

    def parse_args():
        config = module.config_parser.parse_known_args()[0].config
        if config:
            check_config_keys(module.parser, config)
        args, args_text = original_parse()
        check_distillation_args(args)
        check_model_sources(args)
        if args.kd_distill_type == 'trajectory':
            # train.py's branch that builds FeatureDistillationTask builds trajectory distillation
            args.kd_distill_type = 'feature'
            module.FeatureDistillationTask = functools.partial(trajectory_task, args)
        return args, args_text

    def classification_task(model, **kwargs):
        if uses_deep_supervision(model):
            return DeepSupervisionTask(model, **kwargs)
        return classification(model, **kwargs)

    original_parse = replace_train_parse_args(module, parse_args)
    module.ClassificationTask = classification_task


def trajectory_task(args, student_model, teacher_model, student_feature_dim=None, teacher_feature_dim=None, **kwargs):
    """:class:`~timm_odevit.tasks.TrajectoryDistillationTask` for train.py's ``args``: its --kd-* flags and the
    data loader's normalisation (--mean / --std), with the keywords train.py gives FeatureDistillationTask (criterion,
    loss weights, device, dtype, verbose; the feature dims are timm's feature distillation's)."""
    from timm_odevit.tasks import TrajectoryDistillationTask
    # the args train.py saves in its checkpoints say what ran
    args.kd_distill_type = 'trajectory'
    flags = {KD_TASK_NAMES.get(k, k[3:]): getattr(args, k) for k in KD_FLAGS}
    return TrajectoryDistillationTask(student_model, teacher_model, mean=args.mean, std=args.std, **flags, **kwargs)


def checked_load_checkpoint(load):
    """validate.py's ``load_checkpoint`` (--checkpoint), which also warns when the config.json beside the weights
    runs them on another grid than the model (:func:`timm_odevit.checkpoint.depth_mismatch`)."""
    def load_checkpoint(model, checkpoint_path, *args, **kwargs):
        from timm_odevit.checkpoint import depth_mismatch
        out = load(model, checkpoint_path, *args, **kwargs)
        warning = depth_mismatch(model, checkpoint_path)
        if warning:
            print(warning, file=sys.stderr)
        return out
    return load_checkpoint


def main(argv: Optional[List[str]] = None, setup: Optional[Callable] = None) -> None:
    """Run the timm script the wrapper's flags name with the other arguments. ``setup(module)``, when given, is
    called with train.py's module before it runs (how ``python -m tools.train`` adds its records)."""
    parser = argparse.ArgumentParser(add_help=False, prog='odevit-train')
    ours, rest = _wrapper_flags(parser).parse_known_args(argv)  # argv None: sys.argv[1:]
    if ours.validate and ours.script not in (None, 'validate.py'):
        raise SystemExit(
            f'error: --validate runs validate.py, --script {ours.script} another script: give one'
        )
    script = 'validate.py' if ours.validate else ours.script or 'train.py'
    try:
        path = locate_script(script, ours.timm_train)
    except FileNotFoundError as e:
        if '-h' in rest or '--help' in rest:
            _wrapper_flags(argparse.ArgumentParser(prog='odevit-train')).print_help()
        raise SystemExit(f'error: {e}')
    module = load_script(path)
    _wrapper_flags(module.parser.add_argument_group(f'timm_odevit wrapper (odevit-{path.stem})'))
    if script == 'train.py':
        _add_arguments(module.parser)
        _install_tasks(module)
        if setup:
            setup(module)
    else:
        check_model_sources(module.parser.parse_known_args(rest)[0])  # its --model
        # the script's own name for timm's function; timm is untouched
        if hasattr(module, 'load_checkpoint'):
            module.load_checkpoint = checked_load_checkpoint(module.load_checkpoint)
    if not any(a == '--device' or a.startswith('--device=') for a in rest):
        import torch
        # train.py defaults to cuda; run on the CPU instead of failing
        if not torch.cuda.is_available():
            rest = rest + ['--device', 'cpu']
    sys.argv = [str(path)] + rest
    module.main()


def _entry_point(*wrapper_args):
    """A console script: :func:`main` with ``wrapper_args`` before the command line's arguments."""
    return lambda: main([*wrapper_args, *sys.argv[1:]])


validate_main = _entry_point('--validate')
inference_main = _entry_point('--script', 'inference.py')
benchmark_main = _entry_point('--script', 'benchmark.py')
