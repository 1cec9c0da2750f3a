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
import shutil
import sys
import tempfile
from typing import Any, Dict, List, Optional

import torch

from .model_card import LEARNING_CURVE, TRAINING_LOG, model_card, plot_learning_curve, read_summary
from .models._common import check_state_dict, upgrade_state_dict

MODEL_FILES = ('config.json', 'model.safetensors', 'README.md')


# ---- checkpoints --------------------------------------------------------------------------------
def model_from_checkpoint(checkpoint: str, use_ema: bool = False, model_name: Optional[str] = None,
                          model_kwargs: Optional[Dict[str, Any]] = None):
    """Rebuild the model of a train.py checkpoint (architecture and --model-kwargs from its args)
    and load its weights strictly. Returns (model, info)."""
    import timm
    import timm_odevit  # noqa: F401
    if not os.path.isfile(checkpoint):
        raise FileNotFoundError(f'checkpoint {checkpoint!r} does not exist')
    ckpt = torch.load(checkpoint, map_location='cpu', weights_only=False)
    if not isinstance(ckpt, dict):
        raise ValueError(f'{checkpoint!r} is not a train.py checkpoint (got {type(ckpt).__name__})')
    args = ckpt.get('args')
    name = model_name or ckpt.get('arch') or getattr(args, 'model', None)
    if name is None:
        raise ValueError(f'{checkpoint!r} names no architecture; pass model_name')
    kwargs = dict(getattr(args, 'model_kwargs', None) or {})
    kwargs.update(model_kwargs or {})
    key = 'state_dict_ema' if use_ema else 'state_dict'
    if key not in ckpt:
        raise KeyError(f'{checkpoint!r} has no {key!r} (keys: {sorted(ckpt)}); '
                       f'{"train with --model-ema" if use_ema else "is it a train.py checkpoint?"}')
    state = upgrade_state_dict({k[len('module.'):] if k.startswith('module.') else k: v for k, v in ckpt[key].items()})
    head = state.get('head.weight')
    if head is not None:
        kwargs.setdefault('num_classes', head.shape[0])
    model = timm.create_model(name, pretrained=False, **kwargs)
    check_state_dict(model, state, source=checkpoint)
    model.load_state_dict(state)
    info = {'architecture': name, 'model_kwargs': kwargs, 'epoch': ckpt.get('epoch'), 'ema': use_ema,
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
@torch.no_grad()
def evaluate(model: torch.nn.Module, data_dir: str, split: str = 'test', batch_size: int = 250,
             workers: int = 2) -> Dict[str, float]:
    """Top-1/top-5 (%) on an ImageFolder split with the model's own preprocessing (timm data pipeline)."""
    return evaluate_together({'model': model}, data_dir, split, batch_size, workers)['model']


@torch.no_grad()
def evaluate_together(models: Dict[str, torch.nn.Module], data_dir: str, split: str = 'test', batch_size: int = 250,
                      workers: int = 2) -> Dict[str, Dict[str, float]]:
    """:func:`evaluate` of several models that share one preprocessing, in one pass over the images."""
    from timm.data import create_dataset, create_loader, resolve_data_config
    configs = {name: resolve_data_config(model=m) for name, m in models.items()}
    data_config = next(iter(configs.values()))
    if any(c != data_config for c in configs.values()):
        raise ValueError(f'the models preprocess differently ({configs}); evaluate them one at a time')
    dataset = create_dataset('', root=data_dir, split=split, is_training=False)
    if len(dataset) == 0:
        raise ValueError(f'no images in {data_dir}/{split}')
    loader = create_loader(dataset, input_size=data_config['input_size'], batch_size=batch_size,
                           interpolation=data_config['interpolation'], mean=data_config['mean'],
                           std=data_config['std'], crop_pct=data_config['crop_pct'], num_workers=workers,
                           use_prefetcher=False)
    counts = {name: [0, 0] for name in models}
    total = 0
    for x, y in loader:
        for name, model in models.items():
            top5 = model.eval()(x).topk(5, dim=-1).indices
            counts[name][0] += (top5[:, 0] == y).sum().item()
            counts[name][1] += (top5 == y[:, None]).any(-1).sum().item()
        total += y.numel()
    return {name: {'top1': 100. * c1 / total, 'top5': 100. * c5 / total, 'images': total,
                   'nfe': int(getattr(models[name], 'nfe', 0))} for name, (c1, c5) in counts.items()}


# ---- export -------------------------------------------------------------------------------------
def export(checkpoint: str, out_dir: str, use_ema: bool = False, eval_dir: Optional[str] = None,
           eval_split: str = 'test', repo_id: Optional[str] = None, dataset: str = 'cifar10',
           train_command: Optional[str] = None, model_kwargs: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """train.py checkpoint -> Hub folder (model.safetensors, config.json with the classes' label_names, README.md
    model card; the run's summary.csv copied and drawn as learning_curve.png, training time from its
    train_time.json).
    Returns the metrics."""
    from timm.models import save_for_hf
    model, info = model_from_checkpoint(checkpoint, use_ema=use_ema, model_kwargs=model_kwargs)
    if repo_id:
        model.pretrained_cfg = dict(model.pretrained_cfg, hf_hub_id=repo_id)
    if not eval_dir:
        raise ValueError('the model card needs a measured accuracy: pass eval_dir (an ImageFolder with a test split)')
    out = pathlib.Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = pathlib.Path(tempfile.mkdtemp(dir=out.parent, prefix=f'.{out.name}.partial-'))
    classes = sorted(p.name for p in (pathlib.Path(eval_dir) / eval_split).iterdir() if p.is_dir())
    model_config = {'label_names': classes} if len(classes) == model.num_classes else {}
    run_dir = pathlib.Path(checkpoint).parent
    if (run_dir / 'train_time.json').is_file():
        info['train_time'] = json.loads((run_dir / 'train_time.json').read_text())
    try:  # written and verified in a staging folder: a failure leaves out_dir as it was
        # model args: the model's own record (timm's); label names: the ImageFolder's classes, in its order
        save_for_hf(model, staging, model_config=model_config, safe_serialization=True)
        metrics = evaluate(model, eval_dir, eval_split)
        name = repo_id.split('/')[-1] if repo_id else info['architecture']
        files = list(MODEL_FILES)
        if (run_dir / TRAINING_LOG).is_file():  # the run's per-epoch record travels with the weights
            shutil.copy(run_dir / TRAINING_LOG, staging / TRAINING_LOG)
            files.append(TRAINING_LOG)
            if _has_matplotlib():
                plot_learning_curve(read_summary(run_dir / TRAINING_LOG), staging / LEARNING_CURVE,
                                    f'{name}: validation top-1 per epoch')
                files.append(LEARNING_CURVE)
        (staging / 'README.md').write_text(model_card(
            name, model, metrics, info, dataset, repo_id, train_command=train_command,
            learning_curve=LEARNING_CURVE in files, training_log=TRAINING_LOG in files))
        verify_folder(staging)
        out.mkdir(exist_ok=True)
        for f in files:
            os.replace(staging / f, out / f)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return metrics


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


def verify_folder(folder) -> None:
    """Raise ValueError unless ``folder`` is complete and its weights load strictly into its config."""
    import timm
    import timm_odevit  # noqa: F401
    from safetensors.torch import load_file
    folder = pathlib.Path(folder)
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


# ---- publish / cache ----------------------------------------------------------------------------
def publish(folder: str, repo_id: str, private: bool = False, dry_run: bool = False,
            commit_message: str = 'Add timm_odevit model') -> List[str]:
    """Upload a verified folder with huggingface_hub. The token comes from HF_TOKEN or `hf auth login`
    and is never printed or written. Returns the uploaded file names."""
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
def export_main(argv=None) -> None:
    p = argparse.ArgumentParser(description='Export a train.py checkpoint as a Hugging Face Hub model folder.')
    p.add_argument('checkpoint')
    p.add_argument('out_dir')
    p.add_argument('--ema', action='store_true', help='export the EMA weights')
    p.add_argument('--eval-dir', required=True, help='ImageFolder root to measure the model-card accuracy')
    p.add_argument('--eval-split', default='test')
    p.add_argument('--repo-id', default=None, help='ORG/NAME the folder will be published as')
    p.add_argument('--dataset', default='cifar10')
    p.add_argument('--train-command', default=None)
    args = p.parse_args(argv)
    metrics = export(args.checkpoint, args.out_dir, use_ema=args.ema, eval_dir=args.eval_dir,
                     eval_split=args.eval_split, repo_id=args.repo_id, dataset=args.dataset,
                     train_command=args.train_command)
    print(json.dumps(metrics))


def publish_main(argv=None) -> None:
    p = argparse.ArgumentParser(description='Upload an exported model folder to the Hugging Face Hub.')
    p.add_argument('folder')
    p.add_argument('--repo-id', required=True)
    p.add_argument('--private', action='store_true')
    p.add_argument('--dry-run', action='store_true', help='verify and list what would be uploaded')
    args = p.parse_args(argv)
    files = publish(args.folder, args.repo_id, private=args.private, dry_run=args.dry_run)
    print(('would upload ' if args.dry_run else 'uploaded ') + ', '.join(files) + f' to {args.repo_id}')


if __name__ == '__main__':
    sys.exit(export_main())
