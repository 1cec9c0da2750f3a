"""The teacher of trajectory distillation: a timm ViT-family model, created or read from a train.py checkpoint,
and checked to yield (B, N, D) block outputs."""
import logging
from typing import Any, Dict, Optional, Union

from torch import nn
from timm.models import create_model
from timm.utils import unwrap_model

_logger = logging.getLogger(__name__)

TEACHER_KINDS = 'timm ViT-family teachers (vit_*, deit_*, eva*, beit*, ...)'


def _has_class_token(model: nn.Module) -> bool:
    return bool(getattr(model, 'has_class_token', getattr(model, 'cls_token', None) is not None))


def _teacher_pool(teacher: nn.Module) -> str:
    """How the teacher's head pools its tokens: 'token' ([CLS]) or 'avg' | 'max' | 'avgmax' over patches."""
    pool = getattr(teacher, 'global_pool', None)
    if pool in ('avg', 'max', 'avgmax') and getattr(teacher, 'attn_pool', None) is None:
        return pool
    if (
        pool not in (None, '', 'token', 'avg', 'max', 'avgmax')
        or getattr(teacher, 'attn_pool', None) is not None
    ):
        _logger.warning(
            f'teacher pools with {pool!r} (attention pooling), which cannot be applied to its block '
            'outputs: aligning the [CLS] token if it has one, else the mean of its patch tokens'
        )
    return 'token' if _has_class_token(teacher) else 'avg'


def _check_teacher_kind(teacher: nn.Module) -> int:
    """The number of teacher blocks; TypeError for teachers without (B, N, D) token intermediates."""
    missing = [a for a in ('forward_intermediates', 'num_prefix_tokens', 'embed_dim')
               if getattr(teacher, a, None) is None]
    num_blocks = len(
        getattr(teacher, 'feature_info', None) or getattr(teacher, 'blocks', None) or []
    )
    if missing or not isinstance(teacher.embed_dim, int) or not num_blocks:
        what = (
            f'no {", ".join(missing)}'
            if missing
            else (
                f'embed_dim {teacher.embed_dim!r} is not one width'
                if not isinstance(teacher.embed_dim, int)
                else 'no blocks / feature_info'
            )
        )
        raise TypeError(
            f'teacher {type(teacher).__name__} cannot provide token intermediates ({what}): trajectory '
            f'distillation aligns (B, N, D) block outputs and works with {TEACHER_KINDS}'
        )
    return num_blocks


def load_teacher(
        teacher: Union[str, nn.Module],
        checkpoint: Optional[str] = None,
        num_classes: Optional[int] = None,
        device=None,
        model_kwargs: Optional[Dict[str, Any]] = None,
) -> nn.Module:
    """A frozen timm ViT teacher: a model name (its pretrained weights), 'hf-hub:…' / 'local-dir:…',
    a name plus a local ``checkpoint`` file (see :func:`teacher_from_checkpoint`), or a module.
    ``model_kwargs``: the teacher's create_model kwargs (over a train.py checkpoint's own)."""
    if isinstance(teacher, nn.Module):
        model = teacher
    elif checkpoint is not None:
        model = teacher_from_checkpoint(teacher, checkpoint, model_kwargs)
    else:
        from ..hub import check_model_source
        check_model_source(teacher)  # a local-dir: config.json named before timm reads it
        kwargs: Dict[str, Any] = {'pretrained': True, **(model_kwargs or {})}
        if num_classes is not None:
            kwargs.setdefault('num_classes', num_classes)
        model = create_model(teacher, **kwargs)
    _check_teacher_kind(unwrap_model(model))
    model.requires_grad_(False)
    return model.eval().to(device) if device is not None else model.eval()


def teacher_from_checkpoint(
    name: str, checkpoint: str, model_kwargs: Optional[Dict[str, Any]] = None
) -> nn.Module:
    """Build teacher ``name`` and load ``checkpoint`` strictly (timm's file overlay loads non-strictly and
    would leave a wrong-architecture teacher half-initialised).

    A train.py checkpoint is rebuilt with its own ``--model-kwargs`` (``model_kwargs`` override them) and gives
    the weights its run selected on (EMA with --model-ema, else raw); a bare state dict is built with
    ``model_kwargs``. The class count is the checkpoint's head. Read with ``weights_only=True``."""
    from ..hub import model_from_checkpoint
    return model_from_checkpoint(
        checkpoint, model_name=name, model_kwargs=model_kwargs, what='teacher checkpoint'
    )[0]
