"""The filter that fits pretrained weights to a model: timm's ViT filter, stage heads, pooling heads (reading and
checking weights: :mod:`timm_odevit.checkpoint`)."""
import contextlib
import logging
from typing import Dict, Tuple

import torch
from torch import nn
from timm.models.vision_transformer import (
    VisionTransformer,
    checkpoint_filter_fn as vit_checkpoint_filter_fn,
)

from ..checkpoint import check_state_dict, checkpoint_weights
from ._common import ContinuousDepthViT, _pos_embed_prefix

_logger = logging.getLogger(__name__)

POOLING_HEAD = ('norm.', 'fc_norm.', 'attn_pool.')


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
    out, allow = _adapt_pooling_head(out, model, cfg, allow)
    check_state_dict(model, out, source='pretrained weights', allow=allow)
    return out


def _adapt_pooling_head(state: Dict[str, torch.Tensor], model: nn.Module, cfg: dict,
                        allow: tuple) -> Tuple[Dict[str, torch.Tensor], tuple]:
    """Weights trained with another ``global_pool`` than the model's: the pooling their saved model args name
    (``model.pretrained_model_args``: ``local-dir:``, ``hf-hub:``, the packaged releases), or, unrecorded, a
    pooling head of other keys (timm's ViT puts the final norm at ``norm`` for 'token' / 'map', at ``fc_norm``
    for 'avg'; 'map' adds ``attn_pool``). Models without a final norm have the same keys for every pooling, so
    the key sets alone cannot tell. With a new classifier (``num_classes`` differs from the weights') the pooling
    head the weights lack starts fresh (warned) and theirs is dropped, as timm's ViT does; with the weights'
    classifier kept, a ValueError names ``global_pool``. Returns (state, the key prefixes the weights' check
    allows: ``allow``, and the pooling head's when adapted)."""
    own = model.state_dict()
    differ = [k for k in set(own) ^ set(state) if not k.startswith(allow)]
    pool = model.global_pool
    trained = (getattr(model, 'pretrained_model_args', None) or {}).get('global_pool')
    if (differ and not all(k.startswith(POOLING_HEAD) for k in differ)) or (
        not differ and trained in (None, pool)
    ):
        return state, allow
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
    return {k: v for k, v in state.items() if k not in dropped}, allow + POOLING_HEAD


def _init_missing_stage_heads(
    state: Dict[str, torch.Tensor], model: nn.Module
) -> Dict[str, torch.Tensor]:
    """Separate stage heads (bViT deep supervision) that the weights lack start as copies of the
    final head: fine-tuning released single-head weights with ``stage_heads='separate'``."""
    if any(k.startswith('stage_heads.') for k in state):
        return state
    state = dict(state)
    for key, own in model.state_dict().items():
        src = state.get('head.' + key.rpartition('.')[2])
        if key.startswith('stage_heads.') and src is not None and src.shape == own.shape:
            state[key] = src.clone()
    return state
