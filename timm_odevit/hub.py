"""Pretrained weights in timm's Hugging Face Hub format: export, verify, publish, offline cache.

    odevit-export CHECKPOINT OUT_DIR [--ema] [--eval-dir DATA --eval-split test] [--repo-id ORG/NAME]
    odevit-publish OUT_DIR --repo-id ORG/NAME [--private] [--dry-run]

An exported folder holds ``model.safetensors`` and ``config.json`` written by timm's own
``save_for_hf`` (architecture, num_classes, num_features, global_pool, model_args with the solver
settings, pretrained_cfg with mean/std/input size/crop) and a ``README.md`` model card whose
``model-index`` accuracy is MEASURED on the given split with the exported weights. It loads with
``timm.create_model('local-dir:OUT_DIR', pretrained=True)`` or, once uploaded,
``timm.create_model('hf-hub:ORG/NAME', pretrained=True)`` (after ``import timm_odevit``).
"""
import argparse
import importlib.util
import json
import os
import pathlib
import re
import shutil
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from timm.data import resolve_data_config

from ._checks import is_real, read_config, read_json, replaced_folder, write_atomic
from .evaluation import (  # noqa: F401  (evaluate_together, DEFAULT_GRIDS: part of the export API)
    DEFAULT_GRIDS,
    check_grids,
    eval_transform,
    evaluate,
    evaluate_grids,
    evaluate_together,
    image_folder,
    short,
)
from .model_card import LEARNING_CURVE, TRAINING_LOG, model_card, plot_learning_curve, read_summary
from .models._cfgs import CIFAR10_LABELS
from .models._checkpoint import check_state_dict, checkpoint_weights, selected_weights

MODEL_FILES = ('config.json', 'model.safetensors', 'README.md')
EXPORT_FILES = MODEL_FILES + (TRAINING_LOG, LEARNING_CURVE)
KNOWN_DATASETS = {'cifar10': ('CIFAR-10', CIFAR10_LABELS), 'cifar100': ('CIFAR-100', 100)}


# ---- checkpoints --------------------------------------------------------------------------------
# the only non-tensor types a timm train.py checkpoint holds (its ``args``); allowed for one load at a time
TRAIN_CHECKPOINT_GLOBALS = (argparse.Namespace,)


def load_checkpoint_file(path, what: str = 'checkpoint') -> Any:
    """Read a train.py checkpoint / state dict (``.pth``, ``.pth.tar``, ``.safetensors``) without unpickling
    arbitrary objects: ``torch.load(weights_only=True)`` with :data:`TRAIN_CHECKPOINT_GLOBALS` allowed in
    torch's ``safe_globals`` context only. A file holding anything else is refused before any of it runs;
    missing, directory, truncated or corrupt files raise errors that name the file."""
    path = str(path)
    if os.path.isdir(path):
        raise IsADirectoryError(
            f'{what} {path!r} is a directory, not a checkpoint file: give the file inside it'
        )
    if not os.path.isfile(path):
        raise FileNotFoundError(f'{what} {path!r} does not exist')
    try:
        if path.endswith('.safetensors'):
            from safetensors.torch import load_file
            return load_file(path)
        with torch.serialization.safe_globals(list(TRAIN_CHECKPOINT_GLOBALS)):
            return torch.load(path, map_location='cpu', weights_only=True)
    # safetensors / torch raise their own types for truncated or corrupt files
    except Exception as e:
        # as torch's load names it
        unsafe = re.findall(r'unsupported (?:global: )?GLOBAL ([\w.]+)', str(e), flags=re.I)
        if unsafe:
            raise ValueError(
                f'{what} {path!r} holds objects other than tensors and train.py arguments ('
                f'{", ".join(unsafe)}), refused: re-save its state_dict from code you trust'
            ) from None
        raise ValueError(
            f'{what} {path!r} is not a readable PyTorch checkpoint, corrupt or truncated '
            f'({type(e).__name__}: {e}): re-download or re-save it'
        ) from None


def model_from_checkpoint(
    checkpoint: str,
    use_ema: Optional[bool] = None,
    model_name: Optional[str] = None,
    model_kwargs: Optional[Dict[str, Any]] = None,
    what: str = 'checkpoint',
):
    """Rebuild the model of a train.py checkpoint (architecture and --model-kwargs from its args, ``model_kwargs``
    over them; the class count of its classifier) and load its weights strictly; a bare state dict needs
    ``model_name``. ``use_ema``: None (default) takes the weights the run selected on (:func:`selected_weights`),
    True / False the EMA / raw weights. Returns (model, info)."""
    import timm
    ckpt = load_checkpoint_file(checkpoint, what)
    state = checkpoint_weights(ckpt, use_ema, f'{what} {checkpoint!r}')
    args = ckpt.get('args')
    saved = ckpt.get('arch') or getattr(args, 'model', None)
    name = model_name or saved
    if name is None or saved not in (None, name):
        raise ValueError(
            f'{what} {checkpoint!r} is of architecture {saved!r}, not {name!r}: build the one it names'
        )
    kwargs = {**(getattr(args, 'model_kwargs', None) or {}), **(model_kwargs or {})}
    head = getattr(timm.models.get_pretrained_cfg(name), 'classifier', None) or 'head'
    head = f'{head[0] if isinstance(head, (tuple, list)) else head}.weight'
    kwargs.setdefault('num_classes', state[head].shape[0] if head in state else 0)
    if getattr(args, 'in_chans', None) is not None:  # train.py passes --in-chans to create_model
        kwargs.setdefault('in_chans', args.in_chans)
    model = timm.create_model(name, pretrained=False, **kwargs)
    check_state_dict(
        model, state, source=f'{what} {checkpoint!r} (architecture {name!r} built with {kwargs})'
    )
    model.load_state_dict(state)
    # the registered cfg's tag and class names describe the released weights, not this run's (the evaluation names the
    # classes); the preprocessing is the run's, as train.py resolved it (--input-size, --mean, --std, ... over the cfg)
    cfg = {
        k: v
        for k, v in model.pretrained_cfg.items()
        if k not in ('tag', 'label_names', 'label_descriptions')
    }
    model.pretrained_cfg = {
        **cfg,
        **resolve_data_config(vars(args or argparse.Namespace()), model=model),
    }
    epoch = ckpt.get('epoch')
    info = {
        'architecture': name,
        'model_kwargs': kwargs,
        'epoch': epoch,
        'selected': selected_weights(ckpt),
        'ema': selected_weights(ckpt) == 'ema' if use_ema is None else use_ema,
        'metric': ckpt.get('metric'),
        'epoch_1based': None if epoch is None else int(epoch) + 1,
        # JSON values
        'train_args': json.loads(json.dumps(vars(args or argparse.Namespace()), default=str)),
    }
    return model.eval(), info


# ---- export -------------------------------------------------------------------------------------
def resolve_dataset(dataset: Optional[str], classes: List[str], eval_dir: str) -> Tuple[str, str]:
    """(Hub dataset id, display name) of the evaluation: ``dataset`` checked against the evaluated classes
    for the known ones, else recognised from the classes (CIFAR-10), else the eval folder's name."""
    dataset = 'cifar10' if dataset is None and tuple(classes) == CIFAR10_LABELS else dataset
    if dataset is None:
        return (pathlib.Path(eval_dir).resolve().name,) * 2
    check_hub_id(
        '--dataset', dataset, 'a Hub dataset id (NAME or ORG/NAME, e.g. cifar10)', slashes=(0, 1)
    )
    known = KNOWN_DATASETS.get(dataset.lower())
    if known is None:
        return dataset, dataset
    display, expected = known
    count = expected if isinstance(expected, int) else len(expected)
    if (len(classes) != expected) if isinstance(expected, int) else (tuple(classes) != expected):
        raise ValueError(
            f'--dataset {dataset} does not describe the evaluated folder {eval_dir} ({len(classes)} '
            f'classes {short(classes)}, {display} has {count}): give the dataset it holds'
        )
    return dataset.lower(), display


def _check_out_dir(out: pathlib.Path) -> None:
    """The export target must be a new folder, an empty one, or an earlier export (whose files it replaces)."""
    if out.exists() and not out.is_dir():
        raise ValueError(f'out_dir {out} is a file, not a folder: choose a folder')
    foreign = (
        sorted(p.name for p in out.iterdir() if p.name not in EXPORT_FILES) if out.is_dir() else []
    )
    if foreign:
        raise ValueError(
            f'out_dir {out} holds files an export does not write ({short(foreign)}): choose a new or '
            'empty folder (an earlier export is replaced as a whole)'
        )


def export(
    checkpoint: str,
    out_dir: str,
    use_ema: Optional[bool] = None,
    eval_dir: Optional[str] = None,
    eval_split: str = 'test',
    repo_id: Optional[str] = None,
    dataset: Optional[str] = None,
    train_command: Optional[str] = None,
    model_kwargs: Optional[Dict[str, Any]] = None,
    device: str = 'cpu',
    batch_size: int = 250,
    workers: int = 2,
    progress: bool = False,
    grids: Optional[Sequence[int]] = None,
) -> Dict[str, Any]:
    """train.py checkpoint -> Hub folder (model.safetensors, config.json with the classes' label_names, README.md
    model card; the run's summary.csv copied and drawn as learning_curve.png, training time from its
    train_time.json). ``use_ema`` None: the weights the run selected on (EMA with --model-ema). The card's
    split, dataset, classes and image count are those of the evaluation. ``grids``: also measure top-1 at these depths
    (Euler steps / iterations, :func:`evaluate_grids`) on the same images; the card gets the table. ``out_dir`` may
    be a symbolic link: the folder it points to is replaced. Returns the metrics."""
    from timm.models import save_for_hf
    from .layers import ContinuousDepthStack
    if not eval_dir:
        raise ValueError(
            'the model card needs a measured accuracy: pass eval_dir (an ImageFolder with a test split)'
        )
    grids = None if grids is None else check_grids(grids)
    out = pathlib.Path(out_dir).resolve()
    _check_out_dir(out)
    model, info = model_from_checkpoint(checkpoint, use_ema=use_ema, model_kwargs=model_kwargs)
    if repo_id:  # checked before the (long) evaluation
        check_repo_id(repo_id)
        model.pretrained_cfg = dict(model.pretrained_cfg, hf_hub_id=repo_id)
    # a training recipe (the card's command keeps it), not part of the weights
    if getattr(model, 'train_depth', None):
        model.set_train_depth(None)
    classes, _ = image_folder(eval_dir, eval_split)
    _check_training_classes(info['train_args'], classes, str(pathlib.Path(eval_dir) / eval_split))
    dataset, dataset_name = resolve_dataset(dataset, classes, eval_dir)
    if grids and not isinstance(getattr(model, 'blocks', None), ContinuousDepthStack):
        raise ValueError(
            f'grids: {info["architecture"]} is not a continuous-depth model (no depth to change)'
        )
    run_dir = pathlib.Path(checkpoint).parent
    timing = run_dir / 'train_time.json'
    # checked before the evaluation
    timed = info['train_time'] = read_json(timing) if timing.is_file() else {}
    if timed and not (is_real(timed.get('seconds')) and isinstance(timed.get('epochs'), dict)):
        raise ValueError(
            f'{timing} needs "seconds" (a number) and "epochs" (an object): restore or regenerate it'
        )
    rows = read_summary(run_dir / TRAINING_LOG) if (run_dir / TRAINING_LOG).is_file() else None
    metrics = evaluate(
        model,
        eval_dir,
        eval_split,
        batch_size=batch_size,
        workers=workers,
        device=device,
        progress=progress,
    )
    # top-1 at other depths, for the card: the same images, the model's grid restored afterwards
    if grids:
        metrics['grids'] = evaluate_grids(
            model, eval_dir, eval_split, grids, batch_size, workers, device
        )
    model.cpu()
    metrics['dataset'] = dataset
    metrics['dataset_name'] = dataset_name
    info['checkpoint_file'] = pathlib.Path(checkpoint).name
    # written and verified beside out_dir after the (long) evaluation, then swapped in whole: a failure leaves it
    with replaced_folder(out) as staging:
        save_for_hf(model, staging, model_config={'label_names': classes}, safe_serialization=True)
        # safetensors writes its file private (0600); give it the permissions open() gave config.json (the umask's)
        os.chmod(staging / 'model.safetensors', (staging / 'config.json').stat().st_mode & 0o777)
        name = repo_id.split('/')[-1] if repo_id else info['architecture']
        log = rows is not None  # the run's per-epoch record travels with the weights
        # else the card gets no learning curve
        curve = log and importlib.util.find_spec('matplotlib') is not None
        if log:
            shutil.copy(run_dir / TRAINING_LOG, staging / TRAINING_LOG)
        if curve:
            plot_learning_curve(
                rows, staging / LEARNING_CURVE, f'{name}: validation top-1 per epoch'
            )
        (staging / 'README.md').write_text(model_card(
            name, model, metrics, info, metrics['dataset'], repo_id, train_command=train_command,
            learning_curve=curve, training_log=log))
        verify_folder(staging)
    return metrics


def _check_training_classes(train_args: Dict[str, Any], classes: List[str], where: str) -> None:
    """When the run's training ImageFolder is still there, its classes must be the evaluated ones."""
    data_dir = train_args.get('data_dir')
    split = train_args.get('train_split') or 'train'
    if not data_dir or train_args.get('dataset') or not (pathlib.Path(data_dir) / split).is_dir():
        return
    trained = sorted(p.name for p in (pathlib.Path(data_dir) / split).iterdir() if p.is_dir())
    if trained and trained != list(classes):
        raise ValueError(
            f'{where} classes {short(classes)} are not those the model was trained on '
            f'({pathlib.Path(data_dir) / split}: {short(trained)}): evaluate on its dataset'
        )


def check_hub_id(name: str, value, what: str, slashes: Tuple[int, ...] = (1,)) -> None:
    """ValueError naming ``name`` unless ``value`` is an id huggingface_hub accepts (letters, digits, ``-_.``) with
    one of ``slashes`` slashes: text the card shows and the Hub resolves, so nothing else may go into it."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id
    try:
        if not isinstance(value, str):
            raise HFValidationError(f'it is a {type(value).__name__}')
        validate_repo_id(value)
        if value.count('/') not in slashes:
            raise HFValidationError(f'it has {value.count("/")} slashes')
    except HFValidationError as e:
        raise ValueError(f'{name} {value!r} is not {what} ({e})') from None


def check_repo_id(repo_id: str) -> None:
    """ValueError unless ``repo_id`` is a Hub model id huggingface_hub accepts (ORG/NAME)."""
    check_hub_id('--repo-id', repo_id, 'a valid Hub repo id: give ORG/NAME')


# ---- loading ------------------------------------------------------------------------------------
def check_model_source(name) -> None:
    """For a ``local-dir:FOLDER`` model name, :func:`read_config` of the folder (a ValueError naming its config.json
    and the field): timm's own loader, which the package leaves as it is, raises a bare KeyError / TypeError there.
    Called by the package's entry points (the train.py wrapper's --model / --kd-model-name, a distillation teacher, an
    odeified base, tools.speed) before timm reads the file."""
    if isinstance(name, str) and name.startswith('local-dir:'):
        read_config(name[len('local-dir:'):])


def depth_mismatch(model: torch.nn.Module, checkpoint_path) -> str:
    """'' or a warning: the ``config.json`` beside a weights file (a release or export folder) integrates them on
    another grid (method, time points) than ``model``'s. Depth settings are model kwargs, not weights: loaded by
    path, the weights run the model's grid (``local-dir:`` / ``pretrained=True`` read the saved kwargs)."""
    import timm
    from .layers import ContinuousDepthStack
    folder = pathlib.Path(checkpoint_path).parent
    stack = getattr(model, 'blocks', None)
    if not isinstance(stack, ContinuousDepthStack) or not (folder / 'config.json').is_file():
        return ''
    try:
        if read_config(folder)['architecture'] != model.pretrained_cfg.get('architecture'):
            return ''
        saved = timm.create_model(f'local-dir:{folder}', device='meta').blocks.solver
    except Exception:  # not a config this model can be compared with: nothing to warn about
        return ''
    ours = stack.solver
    if (saved.method, saved.steps, round(saved.t_end, 9)) == (
        ours.method,
        ours.steps,
        round(ours.t_end, 9),
    ):
        return ''
    return (
        f'warning: {folder / "config.json"} runs these weights on {saved.steps} {saved.method} steps to '
        f't={saved.t_end:g}, this model on {ours.steps} {ours.method} steps to t={ours.t_end:g}, so its accuracy '
        f'is not theirs: load the folder (--model local-dir:{folder} --pretrained) or give the model their depth '
        'settings (--model-kwargs)'
    )


def verify_folder(folder) -> None:
    """Raise ValueError unless ``folder`` is complete and loads as ``timm.create_model('local-dir:…',
    pretrained=True)`` loads it: its config.json read as timm reads it, its weights exactly as saved, its
    preprocessing applied to a dummy image and one forward run."""
    import timm
    import timm_odevit  # noqa: F401
    from PIL import Image
    folder = pathlib.Path(folder)
    missing = [f for f in MODEL_FILES if not (folder / f).is_file()]
    if missing:
        raise ValueError(
            f'{folder} is not a model folder ({", ".join(missing)} missing): export it with odevit-export'
        )
    config = read_config(folder)
    weights = folder / 'model.safetensors'
    state = load_checkpoint_file(weights, 'weights')
    try:
        model = timm.create_model(f'local-dir:{folder}', pretrained=True).eval()
        check_state_dict(model, state, source=str(weights))
        changed = sorted(k for k, v in model.state_dict().items() if not torch.equal(v, state[k]))
        if changed:
            raise ValueError(
                f'{changed[:4]} do not load as saved: config.json builds another model than the weights'
            )
        raw = {
            k: model.pretrained_cfg[k]
            for k in ('crop_pct', 'crop_mode')
            if k in model.pretrained_cfg
        }
        # 0 is not timm's 0.875
        transform, mode = eval_transform(dict(resolve_data_config(model=model), **raw))
        channels, height, width = model.pretrained_cfg['input_size']
        with torch.no_grad():
            model(transform(Image.new(mode, (width, height))).unsqueeze(0))
    except Exception as e:
        if isinstance(e, ValueError) and str(folder) in str(e):
            raise
        raise ValueError(
            f'{folder} does not load ({type(e).__name__}: {e}): fix config.json or export it again'
        ) from e
    labels = config.get('label_names', config.get('pretrained_cfg', {}).get('label_names'))
    if labels is not None and (
        not isinstance(labels, list)
        or not all(isinstance(n, str) for n in labels)
        or not len(set(labels)) == len(labels) == model.num_classes
    ):
        got = f'{short(labels)} ({len(labels)} names)' if isinstance(labels, list) else repr(labels)
        raise ValueError(
            f'{folder}/config.json: label_names must be a list of {model.num_classes} distinct names, got '
            f'{got}'
        )


# ---- publish / cache ----------------------------------------------------------------------------
def publish(folder: str, repo_id: str, private: bool = False, dry_run: bool = False,
            commit_message: str = 'Add timm_odevit model') -> List[str]:
    """Upload a verified folder with huggingface_hub. The token comes from HF_TOKEN or `hf auth login`
    and is never printed or written. Returns the uploaded file names."""
    check_repo_id(repo_id)
    verify_folder(folder)
    files = sorted(p.name for p in pathlib.Path(folder).iterdir() if p.is_file())
    if dry_run:
        return files
    from huggingface_hub import HfApi
    api = HfApi()
    api.create_repo(repo_id, private=private, exist_ok=True, repo_type='model')
    api.upload_folder(folder_path=str(folder), repo_id=repo_id, commit_message=commit_message)
    return files


def install_in_hf_cache(
    folder, repo_id: str, cache_dir: Optional[str] = None, revision: str = 'main'
) -> pathlib.Path:
    """Place a model folder in the Hugging Face cache layout as if downloaded from ``repo_id``, so
    timm's real hub path (``hf-hub:``, registered ``hf_hub_id``) loads it with HF_HUB_OFFLINE=1."""
    from huggingface_hub.constants import HF_HUB_CACHE
    cache = pathlib.Path(cache_dir or HF_HUB_CACHE)
    repo = cache / ('models--' + repo_id.replace('/', '--'))
    commit = '0' * 40
    snapshot = repo / 'snapshots' / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    for f in pathlib.Path(folder).iterdir():
        if f.is_file():
            write_atomic(snapshot / f.name, f.read_bytes())
    (repo / 'refs').mkdir(exist_ok=True)
    write_atomic(repo / 'refs' / revision, commit)
    return snapshot


# ---- command line -------------------------------------------------------------------------------
CLI_ERRORS = (ValueError, KeyError, TypeError, OSError, RuntimeError)


def _message(e: BaseException) -> str:
    return (
        e.args[0]
        if isinstance(e, KeyError) and e.args and isinstance(e.args[0], str)
        else str(e) or repr(e)
    )


def export_parser() -> argparse.ArgumentParser:
    """odevit-export's command line."""
    p = argparse.ArgumentParser(
        prog='odevit-export',
        description='Export a train.py checkpoint as a Hugging Face Hub model folder: weights, '
        'config.json and a model card whose accuracy is measured here on --eval-dir/--eval-split.',
    )
    p.add_argument(
        'checkpoint', help='train.py checkpoint (model_best.pth.tar / last.pth.tar of a run folder)'
    )
    p.add_argument(
        'out_dir', help='folder to write (new, empty, or an earlier export, which is replaced)'
    )
    weights = p.add_mutually_exclusive_group()
    weights.add_argument(
        '--ema',
        action='store_true',
        default=None,
        help='export the EMA weights (default: the weights the run selected on: EMA with --model-ema)',
    )
    weights.add_argument(
        '--raw', dest='ema', action='store_false', help='export the raw (non-EMA) weights'
    )
    p.add_argument(
        '--eval-dir',
        required=True,
        help='ImageFolder root (DIR/SPLIT/<class>/<image>) to measure the '
        "model-card accuracy on; its classes must be the model's",
    )
    p.add_argument(
        '--eval-split',
        default='test',
        help='split folder of --eval-dir to evaluate (default: test)',
    )
    p.add_argument(
        '--repo-id',
        default=None,
        help='ORG/NAME the folder will be published as (goes into the card)',
    )
    p.add_argument(
        '--dataset',
        default=None,
        help='Hub dataset id for the card (default: recognised from the '
        'evaluated classes, e.g. cifar10, else the --eval-dir folder name); checked against the classes',
    )
    p.add_argument(
        '--train-command', default=None, help='the training command line, quoted in the card'
    )
    p.add_argument('--device', default='cpu', help='device to evaluate on (cpu, cuda, cuda:1, ...)')
    p.add_argument(
        '--batch-size', type=int, default=250, help='evaluation batch size (default: 250)'
    )
    p.add_argument('--workers', type=int, default=2, help='data loading processes (default: 2)')
    p.add_argument(
        '--grids',
        type=int,
        nargs='+',
        default=None,
        metavar='N',
        help='also measure top-1 at these depths (Euler steps / iterations) for the card, e.g. '
        + ' '.join(map(str, DEFAULT_GRIDS)),
    )
    return p


def export_main(argv=None) -> None:
    p = export_parser()
    args = p.parse_args(argv)
    if args.batch_size < 1 or args.workers < 0:
        p.error(
            f'--batch-size must be >= 1 and --workers >= 0, got {args.batch_size} and {args.workers}'
        )
    try:
        torch.device(args.device)
    except RuntimeError as e:
        p.error(f'--device {args.device!r}: {e}')
    try:
        metrics = export(
            args.checkpoint,
            args.out_dir,
            use_ema=args.ema,
            eval_dir=args.eval_dir,
            eval_split=args.eval_split,
            repo_id=args.repo_id,
            dataset=args.dataset,
            train_command=args.train_command,
            device=args.device,
            batch_size=args.batch_size,
            workers=args.workers,
            progress=True,
            grids=args.grids,
        )
    except CLI_ERRORS as e:
        p.error(_message(e))
    print(json.dumps({k: v for k, v in metrics.items() if k != 'classes'}))


def publish_parser() -> argparse.ArgumentParser:
    """odevit-publish's command line."""
    p = argparse.ArgumentParser(
        prog='odevit-publish',
        description='Verify an exported model folder and upload it to the Hugging Face Hub.',
    )
    p.add_argument('folder', help='folder written by odevit-export')
    p.add_argument(
        '--repo-id', required=True, help='ORG/NAME of the Hub model repository (created if missing)'
    )
    p.add_argument('--private', action='store_true', help='create the repository as private')
    p.add_argument(
        '--dry-run',
        action='store_true',
        help='verify and list what would be uploaded, upload nothing',
    )
    return p


def publish_main(argv=None) -> None:
    p = publish_parser()
    args = p.parse_args(argv)
    try:
        files = publish(args.folder, args.repo_id, private=args.private, dry_run=args.dry_run)
    except CLI_ERRORS as e:
        p.error(_message(e))
    print(
        ('would upload ' if args.dry_run else 'uploaded ')
        + ', '.join(files)
        + f' to {args.repo_id}'
    )


if __name__ == '__main__':
    sys.exit(export_main())
