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
import json
import os
import pathlib
import pickle
import shutil
import sys
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from .model_card import LEARNING_CURVE, TRAINING_LOG, model_card, plot_learning_curve, read_summary
from .models._common import CIFAR10_LABELS, check_state_dict, upgrade_state_dict

MODEL_FILES = ('config.json', 'model.safetensors', 'README.md')


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
        raise IsADirectoryError(f'{what} {path!r} is a directory, not a checkpoint file')
    if not os.path.isfile(path):
        raise FileNotFoundError(f'{what} {path!r} does not exist')
    if path.endswith('.safetensors'):
        from safetensors.torch import load_file
        try:
            return load_file(path)
        except Exception as e:  # safetensors raises its own error type for truncated / corrupt files
            raise ValueError(f'{what} {path!r} is corrupt or truncated: {e}') from e
    try:
        with torch.serialization.safe_globals(list(TRAIN_CHECKPOINT_GLOBALS)):
            return torch.load(path, map_location='cpu', weights_only=True)
    except pickle.UnpicklingError as e:
        try:
            unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(path)
        except Exception:  # not a zip checkpoint: the scan itself fails
            unsafe = []
        if unsafe:
            raise ValueError(
                f'{what} {path!r} holds objects other than tensors and train.py arguments ({", ".join(unsafe)}); '
                'refused without loading them (unpickling would run their code). Re-save only its state_dict '
                'from code you trust') from None
        raise ValueError(f'{what} {path!r} is not a readable PyTorch checkpoint (truncated or corrupt?): {e}') from None
    except (RuntimeError, EOFError, OSError, ValueError, KeyError, IndexError) as e:
        raise ValueError(f'{what} {path!r} is not a readable PyTorch checkpoint (truncated or corrupt?): '
                         f'{type(e).__name__}: {e}') from None


def _state_dict_of(ckpt: Dict[str, Any], key: str, checkpoint: str) -> Dict[str, torch.Tensor]:
    """``ckpt[key]`` with DDP's 'module.' stripped and earlier parameter names mapped to today's."""
    state = ckpt[key]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f'{checkpoint!r}: {key!r} is not a state dict of tensors')
    return upgrade_state_dict({k[len('module.'):] if k.startswith('module.') else k: v for k, v in state.items()})


def selected_weights(ckpt: Dict[str, Any]) -> str:
    """Which weights a train.py run selected on: 'ema' when it validated its EMA weights (--model-ema without
    --model-ema-force-cpu: train.py then logs and checkpoints by the EMA's metric), else 'raw'."""
    if not isinstance(ckpt.get('state_dict_ema'), dict):
        return 'raw'
    args = ckpt.get('args')  # train.py writes state_dict_ema only with --model-ema, and validates it unless on CPU
    return 'raw' if getattr(args, 'model_ema_force_cpu', False) else 'ema'


def model_from_checkpoint(checkpoint: str, use_ema: Optional[bool] = None, model_name: Optional[str] = None,
                          model_kwargs: Optional[Dict[str, Any]] = None):
    """Rebuild the model of a train.py checkpoint (architecture and --model-kwargs from its args)
    and load its weights strictly. ``use_ema``: None (default) takes the weights the run selected on
    (:func:`selected_weights`), True / False the EMA / raw weights. Returns (model, info)."""
    import timm
    import timm_odevit  # noqa: F401
    ckpt = load_checkpoint_file(checkpoint)
    if not isinstance(ckpt, dict):
        raise ValueError(f'{checkpoint!r} is not a train.py checkpoint (got {type(ckpt).__name__})')
    if 'state_dict' not in ckpt and all(isinstance(v, torch.Tensor) for v in ckpt.values()):
        ckpt = {'state_dict': ckpt}  # a bare state dict: the architecture must come from model_name
    args = ckpt.get('args')
    name = model_name or ckpt.get('arch') or getattr(args, 'model', None)
    if name is None:
        raise ValueError(f'{checkpoint!r} names no architecture; pass model_name')
    kwargs = dict(getattr(args, 'model_kwargs', None) or {})
    kwargs.update(model_kwargs or {})
    if use_ema is None:
        use_ema = selected_weights(ckpt) == 'ema'
    key = 'state_dict_ema' if use_ema else 'state_dict'
    if key not in ckpt:
        raise KeyError(f'{checkpoint!r} has no {key!r} (keys: {sorted(ckpt)}); '
                       f'{"train with --model-ema" if use_ema else "is it a train.py checkpoint?"}')
    state = _state_dict_of(ckpt, key, checkpoint)
    head = state.get('head.weight')
    if head is not None:
        kwargs.setdefault('num_classes', head.shape[0])
    if getattr(args, 'in_chans', None) is not None:  # train.py passes --in-chans to create_model
        kwargs.setdefault('in_chans', args.in_chans)
    model = timm.create_model(name, pretrained=False, **kwargs)
    check_state_dict(model, state, source=checkpoint)
    model.load_state_dict(state)
    # the registered cfg's class names describe the released weights, not this run's: the evaluation names them
    model.pretrained_cfg = {k: v for k, v in model.pretrained_cfg.items() if k not in ('label_names', 'label_descriptions')}
    epoch = ckpt.get('epoch')
    info = {'architecture': name, 'model_kwargs': kwargs, 'epoch': epoch, 'ema': use_ema,
            'selected': selected_weights(ckpt), 'metric': ckpt.get('metric'),
            'epoch_1based': None if epoch is None else int(epoch) + 1,
            'train_args': _plain_args(args)}
    return model.eval(), info


def _plain_args(args) -> Dict[str, Any]:
    if args is None:
        return {}
    out = {}
    for k, v in vars(args).items():
        try:
            json.dumps(v)
            out[k] = v
        except TypeError:
            out[k] = str(v)
    return out


# ---- evaluation ---------------------------------------------------------------------------------
def image_folder(data_dir: str, split: str) -> Tuple[List[str], List[Tuple[str, int]]]:
    """(classes, [(image path, class index)]) of ``data_dir/split`` as timm's ImageFolder reader sees it;
    ValueError naming the folder when it is missing, empty, or holds images outside class folders."""
    from timm.data.readers.reader_image_folder import find_images_and_targets
    folder = pathlib.Path(data_dir) / split
    if not folder.is_dir():
        have = sorted(p.name for p in pathlib.Path(data_dir).iterdir() if p.is_dir()) \
            if pathlib.Path(data_dir).is_dir() else None
        raise ValueError(f'no split {split!r}: {folder} is not a folder'
                         + (f' ({data_dir} has {have})' if have is not None else f' ({data_dir} does not exist)'))
    samples, class_to_idx = find_images_and_targets(str(folder))
    if not samples:
        raise ValueError(f'no images in {folder} (expected an ImageFolder: {folder}/<class>/<image>)')
    if '' in class_to_idx:
        loose = next(path for path, target in samples if target == class_to_idx[''])
        raise ValueError(f'{folder} holds images outside class folders (e.g. {loose}): expected {folder}/<class>/<image>')
    return sorted(class_to_idx, key=class_to_idx.get), samples


def check_classes(model: torch.nn.Module, classes: List[str], where: str) -> None:
    """ValueError unless the ImageFolder ``classes`` are the model's: as many as its head has outputs, and its
    ``label_names`` (when its pretrained cfg has them) in the same order."""
    num_classes = getattr(model, 'num_classes', None)
    if num_classes != len(classes):
        raise ValueError(f'{where} has {len(classes)} classes ({_short(classes)}) but the model classifies '
                         f'{num_classes}: evaluate it on the dataset it was trained for')
    names = (getattr(model, 'pretrained_cfg', None) or {}).get('label_names')
    if names and list(names) != list(classes):
        raise ValueError(f'{where} classes {_short(classes)} are not the model\'s label_names {_short(names)}')


def _short(items, n: int = 4) -> str:
    items = list(items)
    return str(items[:n])[:-1] + (f', … {len(items)} in all]' if len(items) > n else ']')


class _CheckedImages(torch.utils.data.Dataset):
    """(image, class) of a list of files; an unreadable image raises naming the file (timm's dataset logs it
    and silently returns the next image instead, so counts and accuracy would be wrong)."""

    def __init__(self, samples: List[Tuple[str, int]], transform):
        self.samples, self.transform = samples, transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        from .data import open_rgb
        path, target = self.samples[index]
        return self.transform(open_rgb(path)), target


@torch.no_grad()
def evaluate(model: torch.nn.Module, data_dir: str, split: str = 'test', batch_size: int = 250,
             workers: int = 2, device: str = 'cpu', progress: bool = False) -> Dict[str, Any]:
    """Top-1/top-5 (%) on an ImageFolder split with the model's own preprocessing (timm's eval transform);
    the result also says what was evaluated: split, classes, image count, NFE."""
    return evaluate_together({'model': model}, data_dir, split, batch_size, workers, device, progress)['model']


def _eval_loader(data_config: Dict[str, Any], samples: List[Tuple[str, int]], batch_size: int, workers: int):
    """Batches of (images, targets) with timm's eval transform of ``data_config``."""
    from timm.data import create_transform
    transform = create_transform(**{k: data_config[k] for k in ('input_size', 'interpolation', 'mean', 'std',
                                                                  'crop_pct', 'crop_mode') if k in data_config})
    return torch.utils.data.DataLoader(_CheckedImages(samples, transform), batch_size=batch_size, num_workers=workers)


DEFAULT_GRIDS = (2, 3, 4, 6, 8, 12, 16, 24)  # Euler steps of an ODE model / iterations of a recurrent one


def _check_grids(grids) -> None:
    """ValueError unless ``grids`` is a non-empty sequence of positive integer depths."""
    if isinstance(grids, (str, bytes)) or not grids or any(isinstance(g, bool) or not isinstance(g, int) or g < 1
                                                           for g in grids):
        raise ValueError(f'grids must be positive integers (Euler steps / iterations), got {grids!r}')


def evaluate_grids(model: torch.nn.Module, data_dir: str, split: str = 'test', grids: Sequence[int] = DEFAULT_GRIDS,
                   batch_size: int = 250, workers: int = 2, device: str = 'cpu') -> List[Dict[str, Any]]:
    """Top-1 (%) of a continuous-depth model at each depth of ``grids`` (steps of its solver's method, iterations of a
    recurrence) on an ImageFolder split: :func:`timm_odevit.anytime.accuracy_at_budgets` over the model's own eval
    preprocessing. Returns ``[{'grid', 'depth', 'nfe', 'top1'}, ...]``; the model's own grid is restored."""
    from timm.data import resolve_data_config
    from .anytime import accuracy_at_budgets
    _check_grids(grids)
    classes, samples = image_folder(data_dir, split)
    check_classes(model, classes, str(pathlib.Path(data_dir) / split))
    model.eval().to(torch.device(device))
    try:
        rows = accuracy_at_budgets(model, _eval_loader(resolve_data_config(model=model), samples, batch_size, workers),
                                   grids=list(grids))
    except ValueError as e:  # an unreadable image (re-raised by a worker with its traceback in the message)
        raise ValueError(str(e).strip().splitlines()[-1].removeprefix('ValueError: ')) from None
    return [{'grid': r['grid'], 'depth': g, 'nfe': r['nfe'], 'top1': r['top1']} for g, r in zip(grids, rows)]


@torch.no_grad()
def evaluate_together(models: Dict[str, torch.nn.Module], data_dir: str, split: str = 'test', batch_size: int = 250,
                      workers: int = 2, device: str = 'cpu', progress: bool = False) -> Dict[str, Dict[str, Any]]:
    """:func:`evaluate` of several models that share one preprocessing, in one pass over the images."""
    from timm.data import resolve_data_config
    from tqdm import tqdm
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f'batch_size must be an integer >= 1, got {batch_size!r}')
    configs = {name: resolve_data_config(model=m) for name, m in models.items()}
    data_config = next(iter(configs.values()))
    if any(c != data_config for c in configs.values()):
        raise ValueError(f'the models preprocess differently ({configs}); evaluate them one at a time')
    classes, samples = image_folder(data_dir, split)
    for m in models.values():
        check_classes(m, classes, str(pathlib.Path(data_dir) / split))
    loader = _eval_loader(data_config, samples, batch_size, workers)
    device = torch.device(device)
    for m in models.values():
        m.eval().to(device)
    counts = {name: [0, 0] for name in models}
    total = 0
    try:
        for x, y in tqdm(loader, desc=f'evaluating {split}', unit='batch', disable=not progress, file=sys.stderr):
            x, y = x.to(device), y.to(device)
            for name, model in models.items():
                top5 = model(x).topk(min(5, model.num_classes), dim=-1).indices
                counts[name][0] += (top5[:, 0] == y).sum().item()
                counts[name][1] += (top5 == y[:, None]).any(-1).sum().item()
            total += y.numel()
    except ValueError as e:  # an unreadable image (re-raised by a worker with its traceback in the message)
        raise ValueError(str(e).strip().splitlines()[-1].removeprefix('ValueError: ')) from None
    return {name: {'top1': 100. * c1 / total, 'top5': 100. * c5 / total, 'images': total,
                   'nfe': int(getattr(models[name], 'nfe', 0)), 'split': split, 'classes': classes,
                   'data_dir': str(data_dir)} for name, (c1, c5) in counts.items()}


# ---- export -------------------------------------------------------------------------------------
EXPORT_FILES = MODEL_FILES + (TRAINING_LOG, LEARNING_CURVE)
KNOWN_DATASETS = {'cifar10': ('CIFAR-10', CIFAR10_LABELS), 'cifar100': ('CIFAR-100', 100)}


def resolve_dataset(dataset: Optional[str], classes: List[str], eval_dir: str) -> Tuple[str, str]:
    """(Hub dataset id, display name) of the evaluation: ``dataset`` checked against the evaluated classes
    for the known ones, else recognised from the classes (CIFAR-10), else the eval folder's name."""
    if dataset is None:
        dataset = 'cifar10' if tuple(classes) == CIFAR10_LABELS else None
    if dataset is None:
        name = pathlib.Path(eval_dir).resolve().name
        return name, name
    known = KNOWN_DATASETS.get(dataset.lower())
    if known is None:
        return dataset, dataset
    display, expected = known
    fits = len(classes) == expected if isinstance(expected, int) else tuple(classes) == expected
    if not fits:
        raise ValueError(f'--dataset {dataset} does not describe the evaluated folder {eval_dir}: it has '
                         f'{len(classes)} classes {_short(classes)}, {display} has '
                         f'{expected if isinstance(expected, int) else len(expected)}')
    return dataset.lower(), display


def _check_out_dir(out: pathlib.Path) -> None:
    """The export target must be a new folder, an empty one, or an earlier export (whose files it replaces)."""
    if out.exists() and not out.is_dir():
        raise ValueError(f'out_dir {out} is a file, not a folder')
    if out.is_dir():
        foreign = sorted(p.name for p in out.iterdir() if p.name not in EXPORT_FILES)
        if foreign:
            raise ValueError(f'out_dir {out} holds files an export does not write ({_short(foreign)}); '
                             'choose a new or empty folder (an earlier export is replaced as a whole)')


def _replace_folder(staging: pathlib.Path, out: pathlib.Path) -> None:
    """Swap the complete ``staging`` folder in as ``out``; files of an earlier export do not linger."""
    if not out.exists():
        staging.rename(out)
        return
    old = staging.with_name(staging.name + '.old')
    out.rename(old)
    try:
        staging.rename(out)
    except BaseException:
        old.rename(out)
        raise
    shutil.rmtree(old)


def export(checkpoint: str, out_dir: str, use_ema: Optional[bool] = None, eval_dir: Optional[str] = None,
           eval_split: str = 'test', repo_id: Optional[str] = None, dataset: Optional[str] = None,
           train_command: Optional[str] = None, model_kwargs: Optional[Dict[str, Any]] = None,
           device: str = 'cpu', batch_size: int = 250, workers: int = 2, progress: bool = False,
           grids: Optional[Sequence[int]] = None) -> Dict[str, Any]:
    """train.py checkpoint -> Hub folder (model.safetensors, config.json with the classes' label_names, README.md
    model card; the run's summary.csv copied and drawn as learning_curve.png, training time from its
    train_time.json). ``use_ema`` None: the weights the run selected on (EMA with --model-ema). The card's
    split, dataset, classes and image count are those of the evaluation. ``grids``: also measure top-1 at these depths
    (Euler steps / iterations, :func:`evaluate_grids`) on the same images; the card gets the table. Returns the
    metrics."""
    from timm.models import save_for_hf
    if not eval_dir:
        raise ValueError('the model card needs a measured accuracy: pass eval_dir (an ImageFolder with a test split)')
    if grids is not None:
        _check_grids(grids)
    out = pathlib.Path(out_dir)
    _check_out_dir(out)
    if repo_id:
        check_repo_id(repo_id)
    model, info = model_from_checkpoint(checkpoint, use_ema=use_ema, model_kwargs=model_kwargs)
    if getattr(model, 'train_depth', None):  # a training recipe (the card's command keeps it), not part of the weights
        model.set_train_depth(None)
    classes, _ = image_folder(eval_dir, eval_split)
    check_classes(model, classes, str(pathlib.Path(eval_dir) / eval_split))
    _check_training_classes(info['train_args'], classes, str(pathlib.Path(eval_dir) / eval_split))
    if grids and not hasattr(getattr(model, 'blocks', None), 'is_recurrent'):
        raise ValueError(f'grids: {info["architecture"]} is not a continuous-depth model (no depth to change)')
    metrics = evaluate(model, eval_dir, eval_split, batch_size=batch_size, workers=workers, device=device,
                       progress=progress)
    if grids:  # top-1 at other depths, for the card: the same images, the model's grid restored afterwards
        metrics['grids'] = evaluate_grids(model, eval_dir, eval_split, grids, batch_size, workers, device)
    model.cpu()
    metrics['dataset'], metrics['dataset_name'] = resolve_dataset(dataset, classes, eval_dir)
    if repo_id:
        model.pretrained_cfg = dict(model.pretrained_cfg, hf_hub_id=repo_id)
    run_dir = pathlib.Path(checkpoint).parent
    if (run_dir / 'train_time.json').is_file():
        info['train_time'] = json.loads((run_dir / 'train_time.json').read_text())
    info['checkpoint_file'] = pathlib.Path(checkpoint).name
    out.parent.mkdir(parents=True, exist_ok=True)
    # written and verified in a staging folder after the (long) evaluation: a failure leaves out_dir as it was
    staging = pathlib.Path(tempfile.mkdtemp(dir=out.parent, prefix=f'.{out.name}.partial-'))
    try:
        save_for_hf(model, staging, model_config={'label_names': classes}, safe_serialization=True)
        name = repo_id.split('/')[-1] if repo_id else info['architecture']
        curve = log = False
        if (run_dir / TRAINING_LOG).is_file():  # the run's per-epoch record travels with the weights
            shutil.copy(run_dir / TRAINING_LOG, staging / TRAINING_LOG)
            log = True
            if _has_matplotlib():
                plot_learning_curve(read_summary(run_dir / TRAINING_LOG), staging / LEARNING_CURVE,
                                    f'{name}: validation top-1 per epoch')
                curve = True
        (staging / 'README.md').write_text(model_card(
            name, model, metrics, info, metrics['dataset'], repo_id, train_command=train_command,
            learning_curve=curve, training_log=log))
        verify_folder(staging)
        _replace_folder(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(staging.with_name(staging.name + '.old'), ignore_errors=True)
    return metrics


def _check_training_classes(train_args: Dict[str, Any], classes: List[str], where: str) -> None:
    """When the run's training ImageFolder is still there, its classes must be the evaluated ones."""
    data_dir, split = train_args.get('data_dir'), train_args.get('train_split') or 'train'
    if not data_dir or train_args.get('dataset') or not (pathlib.Path(data_dir) / split).is_dir():
        return
    trained = sorted(p.name for p in (pathlib.Path(data_dir) / split).iterdir() if p.is_dir())
    if trained and trained != list(classes):
        raise ValueError(f'{where} classes {_short(classes)} are not those the model was trained on '
                         f'({pathlib.Path(data_dir) / split}: {_short(trained)})')


def check_repo_id(repo_id: str) -> None:
    """ValueError unless ``repo_id`` is a Hub model id huggingface_hub accepts (ORG/NAME)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id
    try:
        validate_repo_id(repo_id)
    except HFValidationError as e:
        raise ValueError(f'--repo-id {repo_id!r} is not a valid Hub repo id: {e}') from None
    if repo_id.count('/') != 1:
        raise ValueError(f'--repo-id {repo_id!r} must be ORG/NAME')


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
        return True
    except ImportError:
        print('odevit-export: matplotlib is not installed (pip install timm_odevit[analysis]); the card gets no '
              'learning curve', file=sys.stderr)
        return False


def read_config(folder) -> Dict[str, Any]:
    """The timm ``config.json`` of a model folder; ValueError naming the file when it is not one (timm's own
    ``local-dir:`` loader raises a bare JSONDecodeError / KeyError, which the package leaves as it is)."""
    path = pathlib.Path(folder) / 'config.json'
    try:
        config = json.loads(path.read_text())
        if not isinstance(config.get('architecture'), str):
            raise KeyError('architecture')
        if not isinstance(config.get('pretrained_cfg', {}), dict) or not isinstance(config.get('model_args', {}), dict):
            raise TypeError('"pretrained_cfg" and "model_args" must be JSON objects')
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        name = 'TypeError' if isinstance(e, AttributeError) else type(e).__name__
        raise ValueError(f'{path} is not a valid timm config.json ({name}: {e}): it must be a JSON object with '
                         '"architecture" and "pretrained_cfg", as timm.models.save_for_hf / odevit-export write it') from e
    except OSError as e:
        raise ValueError(f'cannot read {path}: {e}') from e
    return config


def depth_mismatch(model: torch.nn.Module, checkpoint_path) -> str:
    """'' or a warning: the ``config.json`` beside a weights file (a release or export folder) runs them with other
    depth settings (Euler steps, iterations, ...) than ``model`` has. Those settings are model kwargs, not weights:
    loaded by path, the weights integrate the model's grid (``local-dir:``/``pretrained=True`` read the kwargs)."""
    from .models import ContinuousDepthViT
    folder = pathlib.Path(checkpoint_path).parent
    if not isinstance(model, ContinuousDepthViT) or not (folder / 'config.json').is_file():
        return ''
    try:
        config = read_config(folder)
    except ValueError:
        return ''
    if config['architecture'] != model.pretrained_cfg.get('architecture'):
        return ''
    current = json.loads(json.dumps(model.blocks.owner_model_args()))  # as config.json holds them
    saved = config.get('model_args') or {}
    differ = sorted(k for k, v in saved.items()  # the settings that change the function the weights compute
                    if k in current and k not in ('check_finite', 'adjoint', 'train_depth') and current[k] != v)
    if not differ:
        return ''
    kwargs = ' '.join(f'{k}={saved[k]}' for k in differ)
    return (f'warning: {folder / "config.json"} runs these weights with {kwargs} (its model_args), this model has '
            f'{", ".join(f"{k}={current[k]}" for k in differ)}: its accuracy is not the release\'s. Create the model '
            f'with those kwargs (--model-kwargs {kwargs}), or load the folder (--model local-dir:{folder} --pretrained).')


def verify_folder(folder) -> None:
    """Raise ValueError unless ``folder`` is complete and its weights load strictly into its config."""
    import timm
    import timm_odevit  # noqa: F401
    from safetensors.torch import load_file
    folder = pathlib.Path(folder)
    if not folder.is_dir():
        raise ValueError(f'{folder} is not a model folder ({"a file" if folder.exists() else "it does not exist"})')
    missing = [f for f in MODEL_FILES if not (folder / f).is_file()]
    if missing:
        raise ValueError(f'{folder} is not a complete model folder: missing {missing}')
    config = read_config(folder)
    architecture = config['architecture']
    try:
        state = upgrade_state_dict(load_file(str(folder / 'model.safetensors')))
    except Exception as e:  # safetensors raises its own error type for truncated / corrupt files
        raise ValueError(f'{folder / "model.safetensors"} is corrupt or truncated: {e}') from e
    kwargs = dict(config.get('model_args', {}))
    kwargs.setdefault('num_classes', config.get('num_classes'))
    model = timm.create_model(architecture, pretrained=False, **kwargs)
    check_state_dict(model, state, source=str(folder / 'model.safetensors'))
    labels = config.get('label_names', config.get('pretrained_cfg', {}).get('label_names'))
    if labels is not None and (not isinstance(labels, list) or not all(isinstance(n, str) for n in labels)
                               or len(labels) != model.num_classes):
        raise ValueError(f'{folder / "config.json"}: label_names must be a list of {model.num_classes} names, one per '
                         f'output of the head, got {_short(labels) if isinstance(labels, list) else repr(labels)}'
                         + (f' ({len(labels)} names)' if isinstance(labels, list) else ''))


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


def install_in_hf_cache(folder, repo_id: str, cache_dir: Optional[str] = None, revision: str = 'main') -> pathlib.Path:
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
            shutil.copy(f, snapshot / f.name)
    (repo / 'refs').mkdir(exist_ok=True)
    (repo / 'refs' / revision).write_text(commit)
    return snapshot


# ---- command line -------------------------------------------------------------------------------
CLI_ERRORS = (ValueError, KeyError, TypeError, OSError, RuntimeError)


def _message(e: BaseException) -> str:
    return e.args[0] if isinstance(e, KeyError) and e.args and isinstance(e.args[0], str) else str(e) or repr(e)


def export_parser() -> argparse.ArgumentParser:
    """odevit-export's command line."""
    p = argparse.ArgumentParser(
        prog='odevit-export', description='Export a train.py checkpoint as a Hugging Face Hub model folder: weights, '
        'config.json and a model card whose accuracy is measured here on --eval-dir/--eval-split.')
    p.add_argument('checkpoint', help='train.py checkpoint (model_best.pth.tar / last.pth.tar of a run folder)')
    p.add_argument('out_dir', help='folder to write (new, empty, or an earlier export, which is replaced)')
    weights = p.add_mutually_exclusive_group()
    weights.add_argument('--ema', action='store_true', default=None,
                         help='export the EMA weights (default: the weights the run selected on: EMA with --model-ema)')
    weights.add_argument('--raw', dest='ema', action='store_false', help='export the raw (non-EMA) weights')
    p.add_argument('--eval-dir', required=True, help='ImageFolder root (DIR/SPLIT/<class>/<image>) to measure the '
                   "model-card accuracy on; its classes must be the model's")
    p.add_argument('--eval-split', default='test', help='split folder of --eval-dir to evaluate (default: test)')
    p.add_argument('--repo-id', default=None, help='ORG/NAME the folder will be published as (goes into the card)')
    p.add_argument('--dataset', default=None, help='Hub dataset id for the card (default: recognised from the '
                   'evaluated classes, e.g. cifar10, else the --eval-dir folder name); checked against the classes')
    p.add_argument('--train-command', default=None, help='the training command line, quoted in the card')
    p.add_argument('--device', default='cpu', help='device to evaluate on (cpu, cuda, cuda:1, ...)')
    p.add_argument('--batch-size', type=int, default=250, help='evaluation batch size (default: 250)')
    p.add_argument('--workers', type=int, default=2, help='data loading processes (default: 2)')
    p.add_argument('--grids', type=int, nargs='+', default=None, metavar='N',
                   help='also measure top-1 at these depths (Euler steps / iterations) for the card, e.g. '
                        + ' '.join(map(str, DEFAULT_GRIDS)))
    return p


def export_main(argv=None) -> None:
    p = export_parser()
    args = p.parse_args(argv)
    if args.batch_size < 1:
        p.error(f'--batch-size must be >= 1, got {args.batch_size}')
    if args.workers < 0:
        p.error(f'--workers must be >= 0, got {args.workers}')
    try:
        torch.device(args.device)
    except RuntimeError as e:
        p.error(f'--device {args.device!r}: {e}')
    try:
        metrics = export(args.checkpoint, args.out_dir, use_ema=args.ema, eval_dir=args.eval_dir,
                         eval_split=args.eval_split, repo_id=args.repo_id, dataset=args.dataset,
                         train_command=args.train_command, device=args.device, batch_size=args.batch_size,
                         workers=args.workers, progress=True, grids=args.grids)
    except CLI_ERRORS as e:
        p.error(_message(e))
    print(json.dumps({k: v for k, v in metrics.items() if k != 'classes'}))


def publish_parser() -> argparse.ArgumentParser:
    """odevit-publish's command line."""
    p = argparse.ArgumentParser(prog='odevit-publish',
                                description='Verify an exported model folder and upload it to the Hugging Face Hub.')
    p.add_argument('folder', help='folder written by odevit-export')
    p.add_argument('--repo-id', required=True, help='ORG/NAME of the Hub model repository (created if missing)')
    p.add_argument('--private', action='store_true', help='create the repository as private')
    p.add_argument('--dry-run', action='store_true', help='verify and list what would be uploaded, upload nothing')
    return p


def publish_main(argv=None) -> None:
    p = publish_parser()
    args = p.parse_args(argv)
    try:
        files = publish(args.folder, args.repo_id, private=args.private, dry_run=args.dry_run)
    except CLI_ERRORS as e:
        p.error(_message(e))
    print(('would upload ' if args.dry_run else 'uploaded ') + ', '.join(files) + f' to {args.repo_id}')


if __name__ == '__main__':
    sys.exit(export_main())
