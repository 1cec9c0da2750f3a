"""The weights of a train.py checkpoint or state dict: which ones to take (EMA or raw), their checks, and the
filter that fits them to a model (timm's ViT filter, stage heads, pooling heads)."""
import contextlib
import logging
from typing import Any, Dict, Optional, Tuple

import torch
from torch import nn
from timm.models import clean_state_dict
from timm.models.vision_transformer import (
    VisionTransformer,
    checkpoint_filter_fn as vit_checkpoint_filter_fn,
)

from ._common import ContinuousDepthViT, _pos_embed_prefix

_logger = logging.getLogger(__name__)

POOLING_HEAD = ('norm.', 'fc_norm.', 'attn_pool.')


def selected_weights(ckpt: Dict[str, Any]) -> str:
    """Which weights a train.py run selected on: 'ema' when it validated its EMA weights (--model-ema without
    --model-ema-force-cpu: train.py then logs and checkpoints by the EMA's metric), else 'raw'."""
    ema = isinstance(ckpt.get('state_dict_ema'), dict) and not getattr(
        ckpt.get('args'), 'model_ema_force_cpu', False
    )
    return 'ema' if ema else 'raw'


def checkpoint_weights(
    ckpt: Any, use_ema: Optional[bool] = None, source: str = 'checkpoint'
) -> Dict[str, Any]:
    """The state dict of a train.py checkpoint (``use_ema`` None: the weights its run selected on, see
    :func:`selected_weights`; True / False: EMA / raw) or a bare state dict, with DDP's ``module.`` and
    torch.compile's ``_orig_mod.`` prefixes stripped (timm's ``clean_state_dict``)."""
    if not isinstance(ckpt, dict):
        raise ValueError(
            f'{source} holds a {type(ckpt).__name__}, not a state dict: give a train.py checkpoint'
        )
    if any(isinstance(ckpt.get(k), dict) for k in ('state_dict', 'state_dict_ema', 'model')):
        ema = selected_weights(ckpt) == 'ema' if use_ema is None else use_ema
        key = (
            'state_dict_ema'
            if ema
            else next((k for k in ('state_dict', 'model') if k in ckpt), 'state_dict')
        )
        if not isinstance(ckpt.get(key), dict):
            raise KeyError(
                f'{source} has no {key!r}: train with --model-ema for EMA weights, or take the raw ones'
            )
        ckpt = ckpt[key]
    return clean_state_dict(ckpt)


def check_state_dict(
    model: torch.nn.Module,
    state: Dict[str, torch.Tensor],
    source: str = 'checkpoint',
    allow: tuple = (),
) -> None:
    """ValueError naming missing / unexpected / mis-shaped / non-finite / integer keys (``allow``: key prefixes
    exempt, e.g. a classifier that timm adapts or drops afterwards)."""
    if not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(
            f'{source} is not a state dict of tensors: give a weights file of this model'
        )
    non_finite = sorted(k for k, v in state.items() if v.is_floating_point() and not v.is_meta
                        and not bool(torch.isfinite(v).all()))
    if non_finite:
        raise ValueError(
            f'{source} holds NaN/Inf in {len(non_finite)} tensors ({non_finite[:4]}): use weights saved '
            'before training diverged'
        )
    own = {k: v for k, v in model.state_dict().items() if not k.startswith(allow)}
    state = {k: v for k, v in state.items() if not k.startswith(allow)}
    common = sorted(set(own) & set(state))
    wrong_type = [f'{k}: {state[k].dtype}' for k in common
                  if own[k].is_floating_point() and not state[k].is_floating_point()]
    if wrong_type:
        raise ValueError(
            f'{source} holds integer tensors for floating-point parameters ({wrong_type[:4]}): it is '
            'corrupted or not weights of this model'
        )
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = [f'{k}: {tuple(state[k].shape)} vs model {tuple(own[k].shape)}' for k in common
              if state[k].shape != own[k].shape]
    problems = [f'{len(missing)} missing keys {missing[:4]}' if missing else '',
                f'{len(unexpected)} unexpected keys {unexpected[:4]}' if unexpected else '',
                f'shape mismatches {shapes[:4]}' if shapes else '']
    if any(problems):
        raise ValueError(
            f'{source} does not match {type(model).__name__} '
            f'({"; ".join(p for p in problems if p)}): build the model the weights were saved from'
        )


def checkpoint_filter_fn(
    state_dict: Dict[str, torch.Tensor], model: VisionTransformer
) -> Dict[str, torch.Tensor]:
    """The weights of a train.py checkpoint (:func:`checkpoint_weights`) through timm's ViT filter (position
    embedding resampled from the source grid, patch embedding resized); weights of another architecture or
    ``global_pool`` are refused with a ValueError naming the keys. Solver settings are not weights: a checkpoint
    trained with another solver loads."""
    state_dict = checkpoint_weights(state_dict, source='pretrained weights')
    try:
        with (
            _pos_embed_prefix(model)
            if isinstance(model, ContinuousDepthViT)
            else contextlib.nullcontext()
        ):
            out = vit_checkpoint_filter_fn(state_dict, model)
    # resampling a position embedding whose (non-square) source grid is unknown
    except RuntimeError as e:
        pos = state_dict.get('pos_embed')
        if pos is None or model.pos_embed is None or pos.shape == model.pos_embed.shape:
            raise
        raise ValueError(
            f'cannot resample pos_embed {tuple(pos.shape)} to {tuple(model.pos_embed.shape)} from an '
            'unknown non-square grid: load it through its saved config (local-dir:, hf-hub:)'
        ) from e
    out = _init_missing_stage_heads(out, model)
    # classifiers / first conv are adapted by timm after this filter (num_classes, in_chans)
    cfg = getattr(model, 'pretrained_cfg', None) or {}
    classifiers = cfg.get('classifier') or 'head'
    classifiers = (classifiers,) if isinstance(classifiers, str) else tuple(classifiers)
    allow = tuple(f'{c}.' for c in classifiers) + (
        'stage_heads.',
        f"{cfg.get('first_conv') or 'patch_embed.proj'}.",
    )
    out, pooling_adapted = _adapt_pooling_head(out, model, cfg, allow)
    check_state_dict(
        model,
        out,
        source='pretrained weights',
        allow=allow + (POOLING_HEAD if pooling_adapted else ()),
    )
    return out


def _adapt_pooling_head(state: Dict[str, torch.Tensor], model: nn.Module, cfg: dict,
                        allow: tuple) -> Tuple[Dict[str, torch.Tensor], bool]:
    """Weights trained with another ``global_pool`` than the model's: the pooling their saved model args name
    (``model.pretrained_model_args``: ``local-dir:``, ``hf-hub:``, the packaged releases), or, unrecorded, a
    pooling head of other keys (timm's ViT puts the final norm at ``norm`` for 'token' / 'map', at ``fc_norm``
    for 'avg'; 'map' adds ``attn_pool``). Models without a final norm have the same keys for every pooling, so
    the key sets alone cannot tell. With a new classifier (``num_classes`` differs from the weights') the pooling
    head the weights lack starts fresh (warned) and theirs is dropped, as timm's ViT does; with the weights'
    classifier kept, a ValueError names ``global_pool``. Returns (state, adapted)."""
    own = model.state_dict()
    differ = [k for k in set(own) ^ set(state) if not k.startswith(allow)]
    pool = getattr(model, 'global_pool', None)
    trained = (getattr(model, 'pretrained_model_args', None) or {}).get('global_pool')
    if (differ and not all(k.startswith(POOLING_HEAD) for k in differ)) or (
        not differ and trained in (None, pool)
    ):
        return state, False
    if cfg.get('num_classes') is None or model.num_classes == cfg.get('num_classes'):
        raise ValueError(
            f"the pretrained weights were trained with global_pool={trained or 'another'!r}, not "
            f'{pool!r}: keep their global_pool, or fine-tune a new classifier (num_classes=N)'
        )
    dropped, fresh = (sorted(k for k in differ if k in keys) for keys in (state, own))
    what = ', '.join(
        [f'{fresh} start fresh'] * bool(fresh) + [f'{dropped} are not loaded'] * bool(dropped)
    )
    _logger.warning(
        f"global_pool={pool!r} differs from the pretrained weights' ({trained or 'another'!r}): "
        f"{what or 'the pooling has no weights of its own'} (the classifier is new too: "
        f'num_classes={model.num_classes})'
    )
    return {k: v for k, v in state.items() if k not in dropped}, True


def _init_missing_stage_heads(
    state: Dict[str, torch.Tensor], model: nn.Module
) -> Dict[str, torch.Tensor]:
    """Separate stage heads (bViT deep supervision) that the weights lack start as copies of the
    final head: fine-tuning released single-head weights with ``stage_heads='separate'``."""
    heads = getattr(model, 'stage_heads', None)
    if not heads or any(k.startswith('stage_heads.') for k in state):
        return state
    state = dict(state)
    own = model.state_dict()
    for i in range(len(heads)):
        for name in ('weight', 'bias'):
            key = f'stage_heads.{i}.{name}'
            src = state.get(f'head.{name}')
            if key in own and src is not None and src.shape == own[key].shape:
                state[key] = src.clone()
    return state
