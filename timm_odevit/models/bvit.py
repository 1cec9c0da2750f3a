"""bViT: single-block recurrent Vision Transformers and their training regimes.

Papers: bViT (arXiv 2605.10661) and "Training Crossroads for Recurrent Vision Transformers:
Recurrence, Neural ODEs, and Deep Supervision" (arXiv 2608.04879).

One standard timm pre-norm ``Block`` B (LayerNorm, qkv bias) is applied over and over:

    regime='recurrent':                    z_t = B(z_{t−1}),  t = 1..T   (solver method 'recurrence')
    regime='ode', field='state_subtracted': ż = B(z) − z   (Euler, h = 1, T steps ≡ recurrent)
    regime='ode', field='naive':            ż = B(z)       (block as a black-box field)

The recurrence is Euler with h = 1 on the state-subtracted field, so both regimes run the same stepper
(``timm_odevit.layers.solver``); the regime is read off the solver's method.

In the ODE regime the horizon is t ∈ [0, T] (``iterations``) and ``steps`` grid steps of the
chosen solver cover it: block evaluations = steps × evaluations per step (euler 1, midpoint 2,
rk4 4), so RK4 with steps = T/4 matches the block evaluations of T recurrent iterations.

Stage-wise deep supervision: ``stages`` lists the time points (1-based) that get a
classification loss, with a shared head or one head per stage and ``stage_weights``; the loss is
computed by :class:`timm_odevit.tasks.DeepSupervisionTask` (training forward returns every stage).
``set_iterations(n)`` runs the trained block for n iterations (horizon n) at inference.

Matched discrete baselines (timm ``VisionTransformer``) are registered beside each bViT:
``*_flops_matched`` = T independent blocks of the same width (same FLOPs), ``*_params_matched``
= 4 blocks at half the width (4·12·(D/2)² = 12·D² block parameters, the bViT's parameter memory).
"""
import logging
import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.layers import trunc_normal_
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from timm.models.vision_transformer import (
    Block,
    VisionTransformer,
    checkpoint_filter_fn as vit_filter_fn,
)

from .._checks import check_int, is_int
from ..layers import BlockField, SolverConfig, pop_solver_kwargs
from ._builder import build_continuous_depth_model
from ._cfgs import CIFAR10_LABELS, CIFAR100_MEAN, CIFAR100_STD, cifar_cfg
from ._checkpoint import checkpoint_filter_fn
from ._common import ContinuousDepthViT, embed_tokens, reset_parameters_

__all__ = ['BViT', 'checkpoint_filter_fn']

_logger = logging.getLogger(__name__)

REGIMES = ('recurrent', 'ode')
STAGE_HEADS = ('shared', 'separate')


def _check_stages(stages: Sequence[int], num_points: Optional[int] = None) -> Tuple[int, ...]:
    """``stages`` as a tuple: 1-based, strictly increasing, and within ``num_points`` if given."""
    stages = tuple(stages)
    if not stages or not all(is_int(s) for s in stages):
        raise ValueError(f'stages must be a non-empty sequence of integers, got {stages!r}')
    if any(b <= a for a, b in zip(stages, stages[1:])):
        raise ValueError(f'stages must be strictly increasing, got {stages}')
    if stages[0] < 1 or (num_points is not None and stages[-1] > num_points):
        raise ValueError(
            f'stages {stages} lie outside the horizon: time points are 1..{num_points or "N"}'
        )
    return tuple(map(int, stages))


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
            attn_drop_rate, proj_drop_rate, drop_path_rate: the block's dropouts.
            kwargs: the ODE solver (solver, steps, step_size, rtol, atol, adjoint, solver_options: steps default T,
                h = T/steps) and check_finite (raise FloatingPointError on a NaN/Inf final state), as in
                :class:`SolverConfig` (its t_end is T); timm's VisionTransformer arguments (img_size, patch_size,
                in_chans, num_classes, global_pool, class_token, reg_tokens, final_norm, fc_norm, dynamic_img_size,
                dynamic_img_pad, drop_rate, pos_drop_rate, patch_drop_rate; :class:`ContinuousDepthViT`).
        """
        if regime not in REGIMES or stage_heads not in STAGE_HEADS:
            raise ValueError(
                f'Unknown regime {regime!r} or stage_heads {stage_heads!r}: use {REGIMES} / {STAGE_HEADS}'
            )
        if regime == 'recurrent' and field == 'naive':
            raise ValueError(
                "field='naive' applies to regime='ode': the recurrence iterates z_k = B(z_(k-1)), Euler "
                "with h = 1 on the state-subtracted field"
            )
        solver = pop_solver_kwargs(kwargs, skip=('t_end',))  # the horizon is ``iterations``
        if regime == 'recurrent' and (
            {'steps', 'step_size'} & set(solver)
            or solver.get('method', 'euler') != 'euler'
            or solver.get('adjoint')
        ):
            raise ValueError(
                "solver, steps, step_size and adjoint apply to regime='ode': pass it, or leave them out"
            )
        if train_depth is not None and stages is not None and len(stages) > 1:
            raise ValueError(
                'train_depth draws the horizon, stages supervise fixed time points: use one of the two'
            )
        iterations = check_int('iterations', iterations)
        drop_rates = dict(
            attn_drop_rate=attn_drop_rate,
            proj_drop_rate=proj_drop_rate,
            drop_path_rate=drop_path_rate,
        )
        super().__init__(
            embed_dim=embed_dim,
            num_heads=num_heads,
            mlp_ratio=mlp_ratio,
            field_drop_rates=drop_rates,
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
        if 'step_size' not in solver:
            solver.setdefault('steps', iterations)
        solver.update(
            t_end=float(iterations), **({'method': 'recurrence'} if regime == 'recurrent' else {})
        )
        self._set_depth(BlockField(block, field), SolverConfig(**solver), train_depth, 'horizon')
        # given stages stay as given when the depth changes (set_iterations, pruning), and may lie beyond the
        # horizon, so that the model args save_for_hf records rebuild that model; deep supervision checks the
        # horizon (forward_stages, DeepSupervisionTask). The default, the last point, follows the depth.
        self._stages = None if stages is None else _check_stages(stages)
        if self._stages is not None and self._stages[-1] > self.num_time_points:
            _logger.warning(
                f'stages {self._stages} lie beyond the {self.num_time_points} time points of this grid '
                f'({self.blocks.solver.describe()}): stages count grid points, iterations only at step 1, '
                'so deep supervision refuses them until the grid reaches them: give stages within '
                f'1..{self.num_time_points}, or more steps'
            )
        weights = (
            [1.0] * len(self.stages) if stage_weights is None else [float(w) for w in stage_weights]
        )
        if (
            len(weights) != len(self.stages)
            or not all(math.isfinite(w) and w >= 0 for w in weights)
            or sum(weights) <= 0
        ):
            raise ValueError(
                f'stage_weights must be {len(self.stages)} finite non-negative numbers with a '
                f'positive sum, got {stage_weights!r}'
            )
        self.stage_weights = tuple(w / sum(weights) for w in weights)
        self.stage_head_type = stage_heads
        # set by DeepSupervisionTask: training forward returns all stages
        self.stage_outputs = False
        self.stage_heads = self._new_stage_heads(self.num_classes)
        self.init_weights(needs_reset=False)  # the other modules initialised themselves

    def init_weights(self, mode: str = '', needs_reset: bool = True) -> None:
        """timm ViT init: truncated-normal(0.02) linears, zero biases, position embedding
        truncated-normal(0.02), [CLS] / registers normal(1e-6) (``mode`` is timm's, unused); ``needs_reset``:
        the other modules (patch-embedding conv, norms) reset their parameters too, as timm's ViT does."""
        if needs_reset:
            reset_parameters_(self, skip=(nn.Linear,))
        for m in self.modules():
            if isinstance(m, nn.Linear) and not m.weight.is_meta:
                trunc_normal_(m.weight, std=.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        if not self.pos_embed.is_meta:
            trunc_normal_(self.pos_embed, std=.02)
            for token in (self.cls_token, self.reg_token):
                if token is not None:
                    trunc_normal_(token, std=1e-6)

    # ---- depth ------------------------------------------------------------------------------
    @property
    def block(self) -> nn.Module:
        return self.field.block

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

    @staticmethod
    def depth_model_args(args: Dict[str, Any]) -> Dict[str, Any]:
        """The stack's solver args as BViT kwargs: the horizon t_end is ``iterations``; the recurrence is
        regime='recurrent' without solver settings (None: dropped)."""
        args = dict(args)
        args.update(iterations=round(args.pop('t_end')), regime='ode')
        if args['solver'] == 'recurrence':
            args.update(
                regime='recurrent',
                solver=None,
                steps=None,
                step_size=None,
                rtol=None,
                atol=None,
                adjoint=None,
                solver_options=None,
            )
        return args

    # ---- heads --------------------------------------------------------------------------------
    def _new_stage_heads(self, num_classes: int) -> nn.ModuleList:
        n = len(self.stages) - 1 if self.stage_head_type == 'separate' else 0
        ref = self.pos_embed
        return nn.ModuleList(
            [
                (
                    nn.Linear(self.embed_dim, num_classes, device=ref.device, dtype=ref.dtype)
                    if num_classes > 0
                    else nn.Identity()
                )
                for _ in range(n)
            ]
        ).train(self.training)

    def reset_classifier(self, num_classes: int, global_pool: Optional[str] = None) -> None:
        super().reset_classifier(num_classes, global_pool)
        self.stage_heads = self._new_stage_heads(num_classes)

    def _head_for(self, stage: int) -> nn.Module:
        """Stage heads of training stages; the final head for every other time point."""
        if self.stage_heads and stage in self.stages[:-1]:
            return self.stage_heads[self.stages.index(stage)]
        return self.head

    def forward_stages(
        self, x: torch.Tensor, stages: Optional[Sequence[int]] = None
    ) -> List[torch.Tensor]:
        """Logits at 1-based time points ``stages`` (default: the training stages), each (B, classes)."""
        stages = _check_stages(self.stages if stages is None else stages, self.num_time_points)
        states = self.blocks.trajectory(embed_tokens(self, x), [s - 1 for s in stages])
        return [
            self._head_for(s)(self.forward_head(self.norm(z), pre_logits=True))
            for s, z in zip(stages, states)
        ]

    def forward(
        self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None, is_causal: bool = False
    ):
        """Logits (B, classes). In training mode with ``stage_outputs`` set (by
        :class:`DeepSupervisionTask`) the list of per-stage logits instead."""
        if self.training and self.stage_outputs:
            return self.forward_stages(x)
        return super().forward(x, attn_mask=attn_mask, is_causal=is_causal)


def _cfg(url: str = '', **kwargs) -> Dict[str, Any]:
    return cifar_cfg(url, paper_ids='arXiv:2608.04879', **kwargs)


_c100 = dict(num_classes=100, mean=CIFAR100_MEAN, std=CIFAR100_STD)
_in1k = dict(
    num_classes=1000, input_size=(3, 224, 224), mean=IMAGENET_DEFAULT_MEAN, std=IMAGENET_DEFAULT_STD
)

# Released weights (release/<name>.<tag>/): trained with the default regime (recurrent, T = 12).
default_cfgs = generate_default_cfgs(
    {
        'bvit_tiny_cifar.c10': _cfg(
            hf_hub_id='timm-odevit/bvit_tiny_cifar.c10',
            packaged='bvit_tiny_cifar.c10',
            label_names=CIFAR10_LABELS,
        ),
        'bvit_small_cifar': _cfg(**_c100),
        'bvit_base_patch16_224': _cfg(**_in1k),
        'vit_tiny_cifar_flops_matched': _cfg(),
        'vit_tiny_cifar_params_matched': _cfg(),
        'vit_small_cifar_flops_matched': _cfg(**_c100),
        'vit_small_cifar_params_matched': _cfg(**_c100),
        'vit_base_patch16_224_flops_matched': _cfg(**_in1k),
        'vit_base_patch16_224_params_matched': _cfg(**_in1k),
    }
)


def _create_baseline(variant: str, pretrained: bool = False, **kwargs) -> VisionTransformer:
    feature_cfg = dict(out_indices=kwargs.pop('out_indices', 3), feature_cls='getter')
    return build_model_with_cfg(
        VisionTransformer,
        variant,
        pretrained,
        pretrained_filter_fn=vit_filter_fn,
        feature_cfg=feature_cfg,
        **kwargs,
    )


_TINY = dict(img_size=32, patch_size=4, embed_dim=192, num_heads=3)
_SMALL = dict(img_size=32, patch_size=4, embed_dim=384, num_heads=6)
_BASE = dict(img_size=224, patch_size=16, embed_dim=768, num_heads=12)


def _params_matched(size: Dict[str, Any]) -> Dict[str, Any]:
    """4 blocks at half the width: 4·12·(D/2)² = 12·D², one bViT block's parameters."""
    return dict(
        size, embed_dim=size['embed_dim'] // 2, num_heads=max(size['num_heads'] // 2, 3), depth=4
    )


@register_model
def bvit_tiny_cifar(pretrained: bool = False, **kwargs) -> BViT:
    """bViT, one block D 192 / 3 heads, T = 12, patch 4, 32 px (CIFAR-10)."""
    return build_continuous_depth_model(
        BViT, 'bvit_tiny_cifar', pretrained, **dict(_TINY, **kwargs)
    )


@register_model
def bvit_small_cifar(pretrained: bool = False, **kwargs) -> BViT:
    """bViT, one block D 384 / 6 heads, T = 12, patch 4, 32 px (CIFAR-100)."""
    return build_continuous_depth_model(
        BViT, 'bvit_small_cifar', pretrained, **dict(_SMALL, **kwargs)
    )


@register_model
def bvit_base_patch16_224(pretrained: bool = False, **kwargs) -> BViT:
    """bViT, one ViT-Base block D 768 / 12 heads, T = 12, patch 16, 224 px."""
    return build_continuous_depth_model(
        BViT, 'bvit_base_patch16_224', pretrained, **dict(_BASE, **kwargs)
    )


@register_model
def vit_tiny_cifar_flops_matched(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """Discrete ViT with the FLOPs of bvit_tiny_cifar: 12 independent D 192 blocks."""
    return _create_baseline(
        'vit_tiny_cifar_flops_matched', pretrained, **dict(_TINY, depth=12, **kwargs)
    )


@register_model
def vit_tiny_cifar_params_matched(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """Discrete ViT with the block parameters of bvit_tiny_cifar: 4 blocks of D 96."""
    return _create_baseline(
        'vit_tiny_cifar_params_matched', pretrained, **dict(_params_matched(_TINY), **kwargs)
    )


@register_model
def vit_small_cifar_flops_matched(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """Discrete ViT with the FLOPs of bvit_small_cifar: 12 independent D 384 blocks."""
    return _create_baseline(
        'vit_small_cifar_flops_matched', pretrained, **dict(_SMALL, depth=12, **kwargs)
    )


@register_model
def vit_small_cifar_params_matched(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """Discrete ViT with the block parameters of bvit_small_cifar: 4 blocks of D 192."""
    return _create_baseline(
        'vit_small_cifar_params_matched', pretrained, **dict(_params_matched(_SMALL), **kwargs)
    )


@register_model
def vit_base_patch16_224_flops_matched(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """Discrete ViT with the FLOPs of bvit_base_patch16_224: 12 independent D 768 blocks."""
    return _create_baseline(
        'vit_base_patch16_224_flops_matched', pretrained, **dict(_BASE, depth=12, **kwargs)
    )


@register_model
def vit_base_patch16_224_params_matched(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """Discrete ViT with the block parameters of bvit_base_patch16_224: 4 blocks of D 384."""
    return _create_baseline(
        'vit_base_patch16_224_params_matched', pretrained, **dict(_params_matched(_BASE), **kwargs))
