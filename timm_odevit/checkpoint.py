"""Reading train.py checkpoints, weights files and model folders: weights-only loading, the EMA choice, the checks
against a model, the model a checkpoint was trained as, and the check that a folder loads as saved. timm's
``clean_state_dict`` strips the wrapper prefixes."""
import argparse
import json
import os
import pathlib
import re
from typing import Any, Dict, Optional

import timm
import torch
from timm.data import resolve_data_config
from timm.models import clean_state_dict

from ._checks import read_config

MODEL_FILES = ('config.json', 'model.safetensors', 'README.md')


def load_checkpoint_file(path, what: str = 'checkpoint') -> Any:
    """A train.py checkpoint or state dict (``.pth``, ``.pth.tar``, ``.safetensors``) read without unpickling
    arbitrary objects: ``torch.load(weights_only=True)`` with ``argparse.Namespace`` (train.py's ``args``) allowed
    for this one load. Missing, directory, unsafe, truncated or corrupt files raise errors that name the file."""
    path = str(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f'{what} {path!r} is a directory, not a checkpoint file: give the file inside it')
    if not os.path.isfile(path):
        raise FileNotFoundError(f'{what} {path!r} does not exist')
    try:
        if path.endswith('.safetensors'):
            from safetensors.torch import load_file
            return load_file(path)
        with torch.serialization.safe_globals([argparse.Namespace]):
            return torch.load(path, map_location='cpu', weights_only=True)
    except Exception as e:  # safetensors / torch raise their own types for unsafe, truncated or corrupt files
        unsafe = re.findall(r'unsupported (?:global: )?GLOBAL ([\w.]+)', str(e), flags=re.I)
        if unsafe:
            raise ValueError(
                f'{what} {path!r} holds objects other than tensors and train.py arguments ({", ".join(unsafe)}), '
                'refused: re-save its state_dict from code you trust'
            ) from None
        raise ValueError(
            f'{what} {path!r} is not a readable PyTorch checkpoint, corrupt or truncated ({type(e).__name__}: {e}): '
            're-download or re-save it'
        ) from None


def selected_weights(ckpt: Dict[str, Any]) -> str:
    """Which weights a train.py run selected on: 'ema' when it validated its EMA weights (--model-ema without
    --model-ema-force-cpu: train.py then logs and checkpoints by the EMA's metric), else 'raw'."""
    force_cpu = getattr(ckpt.get('args'), 'model_ema_force_cpu', False)
    return 'ema' if isinstance(ckpt.get('state_dict_ema'), dict) and not force_cpu else 'raw'


def checkpoint_weights(ckpt: Any, use_ema: Optional[bool] = None, source: str = 'checkpoint') -> Dict[str, Any]:
    """The state dict of a train.py checkpoint (``use_ema`` None: the weights its run selected on, see
    :func:`selected_weights`; True / False: EMA / raw) or of a bare state dict, through timm's ``clean_state_dict``
    (DDP's ``module.`` and torch.compile's ``_orig_mod.`` prefixes stripped)."""
    if not isinstance(ckpt, dict):
        raise ValueError(f'{source} holds a {type(ckpt).__name__}, not a state dict: give a train.py checkpoint')
    if any(isinstance(ckpt.get(k), dict) for k in ('state_dict', 'state_dict_ema', 'model')):
        ema = selected_weights(ckpt) == 'ema' if use_ema is None else use_ema
        key = 'state_dict_ema' if ema else next((k for k in ('state_dict', 'model') if k in ckpt), 'state_dict')
        if not isinstance(ckpt.get(key), dict):
            raise KeyError(f'{source} has no {key!r}: train with --model-ema for EMA weights, or take the raw ones')
        ckpt = ckpt[key]
    return clean_state_dict(ckpt)


def check_state_dict(model: torch.nn.Module, state: Dict[str, Any], source: str = 'checkpoint',
                     allow: tuple = ()) -> None:
    """ValueError naming missing / unexpected / mis-shaped / non-finite / integer keys (``allow``: key prefixes
    exempt, e.g. a classifier that timm adapts or drops afterwards)."""
    if not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f'{source} is not a state dict of tensors: give a weights file of this model')
    non_finite = [k for k, v in state.items() if v.is_floating_point() and not v.is_meta and not v.isfinite().all()]
    if non_finite:
        raise ValueError(
            f'{source} holds NaN/Inf in {len(non_finite)} tensors ({sorted(non_finite)[:4]}): use weights saved '
            'before training diverged'
        )
    own = {k: v for k, v in model.state_dict().items() if not k.startswith(allow)}
    state = {k: v for k, v in state.items() if not k.startswith(allow)}
    common = sorted(set(own) & set(state))
    integer = [f'{k}: {state[k].dtype}' for k in common
               if own[k].is_floating_point() and not state[k].is_floating_point()]
    if integer:
        raise ValueError(
            f'{source} holds integer tensors for floating-point parameters ({integer[:4]}): it is corrupted or not '
            'weights of this model'
        )
    problems = {
        'missing keys': sorted(set(own) - set(state)),
        'unexpected keys': sorted(set(state) - set(own)),
        'shape mismatches': [f'{k}: {tuple(state[k].shape)} vs model {tuple(own[k].shape)}' for k in common
                             if state[k].shape != own[k].shape],
    }
    if any(problems.values()):
        raise ValueError(
            f'{source} does not match {type(model).__name__} '
            f'({"; ".join(f"{len(keys)} {what} {keys[:4]}" for what, keys in problems.items() if keys)}): build the '
            'model the weights were saved from'
        )


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
    True / False the EMA / raw weights. Returns (model in eval mode, info)."""
    ckpt = load_checkpoint_file(checkpoint, what)
    state = checkpoint_weights(ckpt, use_ema, f'{what} {checkpoint!r}')
    args = ckpt.get('args') or argparse.Namespace()
    saved = ckpt.get('arch') or getattr(args, 'model', None)
    name = model_name or saved
    if name is None or saved not in (None, name):
        raise ValueError(f'{what} {checkpoint!r} is of architecture {saved!r}, not {name!r}: build the one it names')
    kwargs = {**(getattr(args, 'model_kwargs', None) or {}), **(model_kwargs or {})}
    head = getattr(timm.models.get_pretrained_cfg(name), 'classifier', None) or 'head'
    head = f'{head if isinstance(head, str) else head[0]}.weight'
    kwargs.setdefault('num_classes', state[head].shape[0] if head in state else 0)
    if getattr(args, 'in_chans', None) is not None:  # train.py passes --in-chans to create_model
        kwargs.setdefault('in_chans', args.in_chans)
    model = timm.create_model(name, **kwargs)
    check_state_dict(model, state, source=f'{what} {checkpoint!r} (architecture {name!r} built with {kwargs})')
    model.load_state_dict(state)
    # the registered cfg's tag and class names describe the released weights, not this run's (the evaluation names the
    # classes); the preprocessing is the run's, as train.py resolved it (--input-size, --mean, --std, ... over the cfg)
    cfg = {k: v for k, v in model.pretrained_cfg.items() if k not in ('tag', 'label_names', 'label_descriptions')}
    model.pretrained_cfg = {**cfg, **resolve_data_config(vars(args), model=model)}
    selected = selected_weights(ckpt)
    info = {
        'architecture': name,
        'model_kwargs': kwargs,
        'epoch': ckpt.get('epoch'),
        'selected': selected,
        'ema': selected == 'ema' if use_ema is None else use_ema,
        'metric': ckpt.get('metric'),
        'train_args': json.loads(json.dumps(vars(args), default=str)),  # JSON values
    }
    return model.eval(), info


def depth_mismatch(model: torch.nn.Module, checkpoint_path) -> str:
    """'' or a warning: the ``config.json`` beside a weights file (a release or export folder) integrates them on
    another grid (method, steps, end time) than ``model``'s. Depth settings are model kwargs, not weights: loaded by
    path, the weights run the model's grid (``local-dir:`` / ``pretrained=True`` read the saved kwargs)."""
    folder = pathlib.Path(checkpoint_path).parent
    try:  # a model without a solver, no config.json beside the weights (read_config's ValueError)
        ours = model.blocks.solver
        if read_config(folder)['architecture'] != model.pretrained_cfg.get('architecture'):
            return ''
        saved = timm.create_model(f'local-dir:{folder}', device='meta').blocks.solver
    except Exception:  # not a config this model can be compared with: nothing to warn about
        return ''
    if (saved.method, saved.steps, round(saved.t_end, 9)) == (ours.method, ours.steps, round(ours.t_end, 9)):
        return ''
    return (
        f'warning: {folder / "config.json"} runs these weights on {saved.steps} {saved.method} steps to '
        f't={saved.t_end:g}, this model on {ours.steps} {ours.method} steps to t={ours.t_end:g}, so its accuracy '
        f'is not theirs: load the folder (--model local-dir:{folder} --pretrained) or give the model their depth '
        'settings (--model-kwargs)'
    )


def check_model_source(name) -> None:
    """For a ``local-dir:FOLDER`` model name, :func:`read_config` of the folder (a ValueError naming its config.json
    and the field): timm's own loader, which the package leaves as it is, raises a bare KeyError / TypeError there.
    Called by the package's entry points (the train.py wrapper's --model / --kd-model-name, a distillation teacher, an
    odeified base, tools.speed) before timm reads the file."""
    if isinstance(name, str) and name.startswith('local-dir:'):
        read_config(name[len('local-dir:'):])


def verify_folder(folder) -> None:
    """Raise ValueError unless ``folder`` is complete and loads as ``timm.create_model('local-dir:…',
    pretrained=True)`` loads it: its config.json read as timm reads it, its weights exactly as saved, its
    preprocessing applied to a dummy image and one forward run."""
    from PIL import Image
    from .loader import eval_transform, short
    folder = pathlib.Path(folder)
    missing = [f for f in MODEL_FILES if not (folder / f).is_file()]
    if missing:
        raise ValueError(
            f'{folder} is not a model folder ({", ".join(missing)} missing): export it with odevit-export'
        )
    read_config(folder)
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
        raise ValueError(
            f'{folder} does not load ({type(e).__name__}: {e}): fix config.json or export it again'
        ) from e
    # config.json's label_names (top level, else its pretrained_cfg's), as timm loaded them
    labels = model.pretrained_cfg.get('label_names')
    if labels is not None and not (
        isinstance(labels, list)
        and all(isinstance(n, str) for n in labels)
        and len(set(labels)) == len(labels) == model.num_classes
    ):
        got = f'{short(labels)} ({len(labels)} names)' if isinstance(labels, list) else repr(labels)
        raise ValueError(
            f'{folder}/config.json: label_names must be a list of {model.num_classes} distinct names, got '
            f'{got}'
        )
