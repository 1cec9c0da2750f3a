"""bViT: single-block recurrent Vision Transformers and their training regimes.

Papers: bViT (arXiv 2605.10661) and "Training Crossroads for Recurrent Vision Transformers:
Recurrence, Neural ODEs, and Deep Supervision" (arXiv 2608.04879).

One standard timm pre-norm ``Block`` B (LayerNorm, qkv bias) is applied over and over:

    regime='recurrent':                    z_t = B(z_{t−1}),  t = 1..T   (solver method 'recurrence')
    regime='ode', field='state_subtracted': ż = B(z) − z   (Euler, h = 1, T steps ≡ recurrent)
    regime='ode', field='naive':            ż = B(z)       (block as a black-box field)

Both regimes run the same stepper (the recurrence is Euler with h = 1 on the state-subtracted field); the regime is
read off the solver's method. In the ODE regime ``steps`` grid steps cover the horizon [0, T] (``iterations``): block
evaluations = steps × evaluations per step, so RK4 with steps = T/4 matches T recurrent iterations.

Deep supervision: ``stages`` lists the time points (1-based) with a classification loss (a shared head or one per
stage, ``stage_weights``), computed by :class:`timm_odevit.tasks.DeepSupervisionTask`. ``set_iterations(n)`` runs
the block n times at inference. The matched discrete baselines are in :mod:`.baselines`.
"""
import functools
import logging
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import nn
from timm.layers import get_device_dtype, trunc_normal_
from timm.models import generate_default_cfgs, named_apply, register_model
from timm.models.vision_transformer import Block, init_weights_vit_timm

from .._checks import check_int
from ..layers import BlockField, SolverConfig, solver_config
from ..layers.solver import flat_solver_kwargs
from ._builder import build_continuous_depth_model
from ._cfgs import CIFAR10_LABELS, CIFAR100_CFG, IMAGENET_CFG, cifar_cfg
from ._checkpoint import checkpoint_filter_fn
from ._common import ContinuousDepthViT, embed_tokens
from ._stages import check_stages, normalised_weights

__all__ = ['BViT', 'checkpoint_filter_fn']

_logger = logging.getLogger(__name__)

REGIMES = ('recurrent', 'ode')
STAGE_HEADS = ('shared', 'separate')


class BViT(ContinuousDepthViT):
    """Single-block recurrent ViT: a timm ``VisionTransformer`` whose ``blocks`` apply one timm
    ``Block`` T times (tokens (B, 1 + M, D)), as a recurrence or an ODE, with deep supervision."""

    def __init__(
            self,
            embed_dim: int = 192,
            num_heads: int = 3,
            mlp_ratio: float = 4.,
            qkv_bias: bool = True,
            iterations: int = 12,
            regime: str = 'recurrent',
            field: str = 'state_subtracted',
            train_depth: Optional[Sequence[int]] = None,
            stages: Optional[Sequence[int]] = None,
            stage_heads: str = 'shared',
            stage_weights: Optional[Sequence[float]] = None,
            solver: Union[None, str, Dict[str, Any], SolverConfig] = None,
            attn_drop_rate: float = 0.,
            proj_drop_rate: float = 0.,
            drop_path_rate: float = 0.,
            device=None,
            dtype=None,
            **kwargs,
    ):
        """
        Args:
            embed_dim, num_heads, mlp_ratio, qkv_bias: the one timm Block.
            iterations: T, the training horizon (recurrent iterations / ODE time span [0, T]).
            regime: 'recurrent' (the solver method 'recurrence') or 'ode'.
            field: ODE field, 'state_subtracted' (ż = B(z) − z) or 'naive' (ż = B(z)).
            train_depth: anytime training, (lo, hi): each training forward runs a horizon (iterations) drawn
                uniformly from lo..hi at the same step length (eval uses ``iterations``); not with ``stages``.
            stages: 1-based time points with a classification loss (default: the last only).
            stage_heads: 'shared' (one head for all stages) or 'separate' (one per stage).
            stage_weights: loss weight per stage (normalised to sum 1; default uniform).
            solver: the ODE regime's solver, a :class:`SolverConfig`, a dict of its fields or a method name (default
                Euler; steps default T, t_end is T, h = T/steps); the recurrence takes only ``check_finite`` (raise
                FloatingPointError on a NaN/Inf final state). ``create_model`` also reads the flat solver kwargs of
                released config.json files (``layers.solver.FLAT_SOLVER_KWARGS``).
            attn_drop_rate, proj_drop_rate, drop_path_rate: the block's dropouts.
            kwargs: timm's VisionTransformer arguments (:class:`ContinuousDepthViT`).
        """
        # (an unknown field is BlockField's ValueError)
        if regime not in REGIMES or stage_heads not in STAGE_HEADS:
            raise ValueError(
                f'Unknown regime {regime!r} or stage_heads {stage_heads!r}: use {REGIMES} / '
                f'{STAGE_HEADS}'
            )
        if regime == 'recurrent' and field == 'naive':
            raise ValueError(
                "field='naive' applies to regime='ode': the recurrence iterates z_k = B(z_(k-1)), Euler "
                "with h = 1 on the state-subtracted field"
            )
        iterations = check_int('iterations', iterations)
        if isinstance(solver, SolverConfig):
            solver = solver.to_dict()
        fields = {'method': solver} if isinstance(solver, str) else dict(solver or {})
        if fields.get('t_end', iterations) != iterations:
            raise ValueError(
                f"a bViT's horizon t_end is its iterations ({iterations}), got t_end={fields['t_end']!r}: leave t_end "
                'out of solver (a SolverConfig carries t_end=1.0 unless given), or set iterations'
            )
        fields.pop('t_end', None)
        if regime == 'recurrent':
            ode_only = {'steps', 'step_size'} & set(fields) or fields.get('adjoint')
            if ode_only or fields.get('method', 'euler') != 'euler':
                raise ValueError(
                    "solver, steps, step_size and adjoint apply to regime='ode': pass it, or leave them out"
                )
            fields['method'] = 'recurrence'
        if train_depth is not None and stages is not None and len(stages) > 1:
            raise ValueError(
                'train_depth draws the horizon, stages supervise fixed time points: use one of the two'
            )
        super().__init__(
            embed_dim=embed_dim,
            num_heads=num_heads,
            mlp_ratio=mlp_ratio,
            field_drop_rates=dict(
                attn_drop_rate=attn_drop_rate,
                proj_drop_rate=proj_drop_rate,
                drop_path_rate=drop_path_rate,
            ),
            device=device,
            dtype=dtype,
            **kwargs,
        )
        block = Block(
            embed_dim,
            num_heads,
            mlp_ratio=mlp_ratio,
            qkv_bias=qkv_bias,
            proj_drop=proj_drop_rate,
            attn_drop=attn_drop_rate,
            drop_path=drop_path_rate,
            device=device,
            dtype=dtype,
        )
        config = solver_config(fields, steps=iterations, t_end=float(iterations))
        self._set_depth(BlockField(block, field), config, train_depth, 'horizon')
        # given stages stay as given when the depth changes (set_iterations, pruning), and may lie beyond the
        # horizon, so that the model args save_for_hf records rebuild that model; deep supervision checks the
        # horizon (forward_stages, DeepSupervisionTask). The default, the last point, follows the depth.
        self._stages = None if stages is None else check_stages(stages)
        if self._stages is not None and self._stages[-1] > self.num_time_points:
            _logger.warning(
                f'stages {self._stages} lie beyond the {self.num_time_points} time points of this grid '
                f'({self.blocks.solver.describe()}): stages count grid points, iterations only at step 1, '
                'so deep supervision refuses them until the grid reaches them: give stages within '
                f'1..{self.num_time_points}, or more steps'
            )
        self.stage_weights = normalised_weights(stage_weights, len(self.stages))
        self.stage_head_type = stage_heads
        # set by DeepSupervisionTask: training forward returns all stages
        self.stage_outputs = False
        self.stage_heads = self._new_stage_heads(self.num_classes)
        self.init_weights(needs_reset=False)  # the other modules initialised themselves

    def init_weights(self, mode: str = '', needs_reset: bool = True) -> None:
        """timm ViT init (``init_weights_vit_timm``): truncated-normal(0.02) linears, zero biases, position embedding
        truncated-normal(0.02), [CLS] / registers truncated-normal(1e-6) (``mode`` is timm's, unused); ``needs_reset``:
        the other modules (patch-embedding conv, norms) reset their parameters too, as timm's ViT does. On the meta
        device every step is a no-op."""
        named_apply(functools.partial(init_weights_vit_timm, needs_reset=needs_reset), self)
        trunc_normal_(self.pos_embed, std=.02)
        for token in (self.cls_token, self.reg_token):
            if token is not None:
                trunc_normal_(token, std=1e-6)

    # ---- depth ------------------------------------------------------------------------------
    @property
    def iterations(self) -> int:
        """Current horizon T (recurrent iterations, or ODE time span)."""
        return round(self.blocks.solver.t_end)

    @property
    def regime(self) -> str:
        """'recurrent' while the solver's method is the recurrence, else 'ode'."""
        return 'recurrent' if self.blocks.solver.unit == 'iteration' else 'ode'

    @property
    def stages(self) -> Tuple[int, ...]:
        """The supervised time points (1-based): those given at construction, or the last point of the
        current horizon. Given stages may lie beyond a horizon shortened later: evaluation runs, deep
        supervision (``forward_stages``) refuses until the horizon reaches them again."""
        return self._stages if self._stages is not None else (self.num_time_points,)

    def set_iterations(self, iterations: int) -> None:
        """Run for ``iterations`` (horizon [0, iterations] in the ODE regime, same step length);
        recorded in the model args that save_for_hf exports."""
        self.set_solver(t_end=float(check_int('iterations', iterations)))

    def depth_args(self) -> Dict[str, Any]:
        """The depth's settings as BViT kwargs: the horizon t_end is ``iterations``; the recurrence is
        regime='recurrent' with only ``check_finite`` of its solver settings."""
        solver = self.blocks.solver
        flat = dict(flat_solver_kwargs(solver), t_end=None)
        if self.regime == 'recurrent':
            flat = dict.fromkeys(flat)
            flat['check_finite'] = None if solver.check_finite else False
        return {**super().depth_args(), **flat, 'iterations': self.iterations, 'regime': self.regime}

    # ---- heads --------------------------------------------------------------------------------
    def _new_stage_heads(self, num_classes: int) -> nn.ModuleList:
        n = len(self.stages) - 1 if self.stage_head_type == 'separate' else 0
        dd = get_device_dtype(self)  # timm's, as its reset_classifier builds the head
        heads = [nn.Linear(self.embed_dim, num_classes, **dd) if num_classes > 0 else nn.Identity() for _ in range(n)]
        return nn.ModuleList(heads).train(self.training)

    def reset_classifier(self, num_classes: int, global_pool: Optional[str] = None) -> None:
        super().reset_classifier(num_classes, global_pool)
        self.stage_heads = self._new_stage_heads(num_classes)

    def _head_for(self, stage: int) -> nn.Module:
        """Stage heads of training stages; the final head for every other time point."""
        if self.stage_heads and stage in self.stages[:-1]:
            return self.stage_heads[self.stages.index(stage)]
        return self.head

    def forward_stages(self, x: torch.Tensor, stages: Optional[Sequence[int]] = None) -> List[torch.Tensor]:
        """Logits at 1-based time points ``stages`` (default: the training stages), each (B, classes)."""
        stages = check_stages(self.stages if stages is None else stages, self.num_time_points)
        states = self.blocks.trajectory(embed_tokens(self, x), [s - 1 for s in stages])
        return [
            self._head_for(s)(self.forward_head(self.norm(z), pre_logits=True))
            for s, z in zip(stages, states)
        ]

    def forward(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None, is_causal: bool = False):
        """Logits (B, classes). In training mode with ``stage_outputs`` set (by
        :class:`DeepSupervisionTask`) the list of per-stage logits instead."""
        if self.training and self.stage_outputs:
            return self.forward_stages(x)
        return super().forward(x, attn_mask=attn_mask, is_causal=is_causal)


_cfg = functools.partial(cifar_cfg, paper_ids='arXiv:2608.04879')

# Released weights (release/<name>.<tag>/): trained with the default regime (recurrent, T = 12).
default_cfgs = generate_default_cfgs(
    {
        'bvit_tiny_cifar.c10': _cfg(
            hf_hub_id='timm-odevit/bvit_tiny_cifar.c10',
            packaged='bvit_tiny_cifar.c10',
            label_names=CIFAR10_LABELS,
        ),
        'bvit_small_cifar': _cfg(**CIFAR100_CFG),
        'bvit_base_patch16_224': _cfg(**IMAGENET_CFG),
    }
)

TINY = dict(img_size=32, patch_size=4, embed_dim=192, num_heads=3)
SMALL = dict(img_size=32, patch_size=4, embed_dim=384, num_heads=6)
BASE = dict(img_size=224, patch_size=16, embed_dim=768, num_heads=12)


@register_model
def bvit_tiny_cifar(pretrained: bool = False, **kwargs) -> BViT:
    """bViT, one block D 192 / 3 heads, T = 12, patch 4, 32 px (CIFAR-10)."""
    return build_continuous_depth_model(BViT, 'bvit_tiny_cifar', pretrained, **dict(TINY, **kwargs))


@register_model
def bvit_small_cifar(pretrained: bool = False, **kwargs) -> BViT:
    """bViT, one block D 384 / 6 heads, T = 12, patch 4, 32 px (CIFAR-100)."""
    return build_continuous_depth_model(BViT, 'bvit_small_cifar', pretrained, **dict(SMALL, **kwargs))


@register_model
def bvit_base_patch16_224(pretrained: bool = False, **kwargs) -> BViT:
    """bViT, one ViT-Base block D 768 / 12 heads, T = 12, patch 16, 224 px."""
    return build_continuous_depth_model(BViT, 'bvit_base_patch16_224', pretrained, **dict(BASE, **kwargs))
