"""The teacher of trajectory distillation: a timm ViT-family model, created or read from a train.py checkpoint, whose
block outputs (B, N, D) and last-block attention (B, H, N, N) the task reads."""
import logging
from typing import Any, Dict, List, Optional, Union

import torch
import torch.nn.functional as F
from torch import nn
from timm.layers import global_pool_nlc
from timm.models import create_model
from timm.task.distillation import DistillationTeacher
from timm.utils import AttentionExtract

from ..layers import explicit_attention

_logger = logging.getLogger(__name__)

TEACHER_KINDS = 'timm ViT-family teachers (vit_*, deit_*, eva*, beit*, ...)'


def has_class_token(model: nn.Module) -> bool:
    return getattr(model, 'cls_token', None) is not None


def intermediate_tokens(item) -> torch.Tensor:
    """A ``forward_intermediates(..., return_prefix_tokens=True)`` item, (patches (B, M, D), prefix (B, P, D)) or
    the patches alone -> the tokens (B, P + M, D)."""
    return torch.cat(item[::-1], 1) if isinstance(item, tuple) else item


def load_teacher(
        teacher: Union[str, nn.Module],
        checkpoint: Optional[str] = None,
        num_classes: Optional[int] = None,
        device=None,
        model_kwargs: Optional[Dict[str, Any]] = None,
) -> nn.Module:
    """A frozen teacher in eval mode: a module, a model name (its pretrained weights), 'hf-hub:…' / 'local-dir:…', or
    a name plus a local ``checkpoint`` file, loaded strictly and weights_only (timm's file overlay loads non-strictly
    and would leave a wrong-architecture teacher half-initialised).

    A train.py checkpoint is rebuilt with its own ``--model-kwargs`` (``model_kwargs`` over them) and gives the
    weights its run selected on (EMA with --model-ema, else raw); a bare state dict is built with ``model_kwargs``.
    The class count is the checkpoint's head; a teacher built by name has ``num_classes``. TypeError for models
    without (B, N, D) token intermediates."""
    from ..checkpoint import check_model_source, model_from_checkpoint
    if isinstance(teacher, nn.Module):
        model = teacher
    elif checkpoint is not None:
        model = model_from_checkpoint(
            checkpoint,
            model_name=teacher,
            model_kwargs=model_kwargs,
            what='teacher checkpoint',
        )[0]
    else:
        check_model_source(teacher)  # a local-dir: config.json named before timm reads it
        kwargs = {'pretrained': True, 'num_classes': num_classes, **(model_kwargs or {})}
        model = create_model(teacher, **kwargs)
    needed = ('forward_intermediates', 'num_prefix_tokens', 'embed_dim')
    missing = [a for a in needed if not hasattr(model, a)]
    if missing:
        raise TypeError(
            f'teacher {type(model).__name__} cannot provide token intermediates '
            f'(no {", ".join(missing)}): trajectory distillation aligns (B, N, D) block outputs and works '
            f'with {TEACHER_KINDS}'
        )
    return model.requires_grad_(False).eval().to(device)


class TrajectoryTeacher(DistillationTeacher):
    """timm's distillation teacher (its normalisation), read block by block: the tokens (B, N, D) of its L blocks at
    its own input size, pooled as its head pools them (:meth:`pooled`), and with ``attention`` the softmax
    (B, H, N, N) of its last block, read by timm's ``AttentionExtract`` hook on that block's ``attn_drop`` (its
    non-fused path), so RoPE, relative position biases and q/v biases are those the teacher applies.

    TypeError at construction, after one forward of zeros, for teachers whose intermediates are no (B, N, D) tokens
    or, with ``attention``, whose softmax the hook does not see. Always in eval mode."""

    def __init__(
            self,
            model: nn.Module,
            attention: bool = False,
            device: Optional[torch.device] = None,
            dtype: Optional[torch.dtype] = None,
    ):
        super().__init__(model, device=device, dtype=dtype)
        name = type(model).__name__
        self.num_blocks = len(getattr(model, 'feature_info', None) or model.blocks)
        pool = getattr(model, 'global_pool', None)
        if pool not in ('avg', 'max', 'avgmax', 'token', '', None):
            _logger.warning(
                f'teacher pools with {pool!r} (attention pooling), which cannot be applied to its block '
                'outputs: aligning the [CLS] token if it has one, else the mean of its patch tokens'
            )
        self.pool = pool
        if pool not in ('avg', 'max', 'avgmax'):
            self.pool = 'token' if has_class_token(model) else 'avg'
        self.include_prefix = self.pool != 'token' and getattr(model, 'pool_include_prefix', False)
        size = model.patch_embed.img_size or model.pretrained_cfg['input_size'][-2:]
        self.input_size = tuple(size)
        self.attn_name = None
        if attention:
            self.attn_name = f'blocks.{self.num_blocks - 1}.attn'
            hook = f'{self.attn_name}.attn_drop'
            if hook not in dict(model.named_modules()):
                raise TypeError(
                    f"cannot extract the attention of teacher {name}: timm's AttentionExtract hooks "
                    f'blocks[-1].attn.attn_drop; use attn_mass_weight=0 or one of the {TEACHER_KINDS}'
                )
            self.hooks = AttentionExtract(model, names=[hook], method='hook').hooks
        self._probe(name)

    def train(self, mode: bool = True) -> 'TrajectoryTeacher':
        return super().train(False)

    @torch.no_grad()
    def _probe(self, name: str) -> None:
        x = self.mean_kd.new_zeros(1, self.mean_kd.shape[1], *self.input_size)
        L = self.num_blocks
        D = self.model.embed_dim
        try:
            shapes = [tuple(h.shape) for h in self.states(x, self.mean_kd, self.std_kd)]
        except RuntimeError as e:
            # patches that are no (B, M, D) tokens do not join the prefix tokens
            shapes = [f'{type(e).__name__}: {e}']
        if len(shapes) != L or any(len(s) != 3 or s[-1] != D for s in shapes):
            raise TypeError(
                f'teacher {name} forward_intermediates does not yield {L} (B, N, {D}) token tensors '
                f'(got {shapes}); use one of the {TEACHER_KINDS}'
            )
        if self.attn_name is not None:
            probs = self.attention(x.device)
            H = self.model.get_submodule(self.attn_name).num_heads
            N = shapes[-1][1]
            if probs is None or probs.shape != (1, H, N, N):
                got = 'never fired (the attention always runs fused)' if probs is None else \
                    f'gave {tuple(probs.shape)}, not attention probabilities (1, {H}, {N}, {N})'
                raise TypeError(
                    f"cannot extract the attention of teacher {name} faithfully: timm's AttentionExtract "
                    f'hook on {self.attn_name}.attn_drop {got}; use attn_mass_weight=0 or one of the '
                    f'{TEACHER_KINDS}'
                )

    def prepare(self, x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        """Images (B, C, H, W) normalised with ``mean`` / ``std`` -> the teacher's normalisation and input size."""
        x = self.normalize_input(x, mean, std)
        if tuple(x.shape[-2:]) != self.input_size:
            x = F.interpolate(x, size=self.input_size, mode='bicubic')  # align_corners False
        return x

    @torch.no_grad()
    def states(self, x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> List[torch.Tensor]:
        """The tokens (B, N, D) of every block for images normalised with ``mean`` / ``std``; with ``attention`` the
        last block runs its non-fused attention, whose softmax the hook keeps for :meth:`attention`."""
        attn = nn.Identity() if self.attn_name is None else self.model.get_submodule(self.attn_name)
        with explicit_attention(attn):
            items = self.model.forward_intermediates(
                self.prepare(x, mean, std),
                indices=self.num_blocks,
                output_fmt='NLC',
                return_prefix_tokens=True,
                intermediates_only=True,
            )
        return [intermediate_tokens(item) for item in items]

    def attention(self, device: torch.device) -> Optional[torch.Tensor]:
        """The softmax probabilities (B, H, N, N) of the last block in the latest :meth:`states`."""
        return self.hooks.get_output(device).get(f'{self.attn_name}.attn_drop')

    def pooled(self, tokens: torch.Tensor, num_prefix_tokens: int) -> torch.Tensor:
        """Tokens (B, N, D) with ``num_prefix_tokens`` leading prefix tokens -> (B, D), pooled as the teacher's head
        pools its own: the [CLS] token ('token'), or the avg / max / avgmax of the patch tokens (with the prefix
        tokens when the teacher's head includes them)."""
        return global_pool_nlc(
            tokens,
            pool_type=self.pool,
            num_prefix_tokens=num_prefix_tokens,
            reduce_include_prefix=self.include_prefix,
        )
