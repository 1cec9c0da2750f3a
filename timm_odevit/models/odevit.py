"""ODE-ViT: a Vision Transformer as a well-posed ODE over its tokens.

Paper: "ODE-ViT: Plug & Play Attention Layer from the Generalization of the ViT as an Ordinary
Differential Equation", Carlos Boned Riera, David Romero Sánchez, Oriol Ramos Terrades, arXiv 2511.16501.
Reference code: Bycarkos/ODE-ViT.

The L blocks of a ViT become one shared vector field integrated over t ∈ [0, 1]:

    X(0) = [CLS; registers; patches] + pos,   dX/dt = ψ(t, X),   logits = head(X(1)[CLS])

The defaults are the paper's architecture: CenterNorm field, no norm between X(1) and the head
(the loss sees the scale of X(1); a final LayerNorm hides it and the state then grows 25-180x
along t, docs/results.md "ODE-ViT: parity with the authors' code"), tokens initialised as in the reference
code. Differences from the reference code (README "Differences from the reference code"): every linear/conv
is spectrally initialised (including the attention in-projection; conv bias 0), solver settings are
changeable after training, and a blow-up raises an error instead of NaN logits. bench/odevit_parity.py
trains both side by side.
"""
import functools
from typing import Any, Dict, Optional, Sequence, Union

import torch
from torch import nn
from timm.layers import trunc_normal_
from timm.models import generate_default_cfgs, register_model

from ..layers import ODEViTField, SolverConfig, solver_config, spectral_init_
from ..layers.spectral_init import SPECTRAL_INIT_TYPES
from ._builder import build_continuous_depth_model
from ._cfgs import CIFAR10_LABELS, CIFAR100_CFG, IMAGENET_INPUT, cifar_cfg
from ._checkpoint import checkpoint_filter_fn
from ._common import ContinuousDepthViT

__all__ = ['ODEViT', 'checkpoint_filter_fn']
HEAD_INITS = ('trunc_normal', 'spectral')


class ODEViT(ContinuousDepthViT):
    """Continuous-depth Vision Transformer (ODE-ViT): a timm ``VisionTransformer`` whose ``blocks``
    integrate one shared :class:`ODEViTField` over t ∈ [0, t_end].

    Tokens are [CLS] + ``reg_tokens`` registers (no position embedding) + M patches, shape
    (B, 1 + R + M, D). ``blocks`` is a :class:`ContinuousDepthStack`: ``len(blocks)`` = steps, block
    i of ``forward_intermediates`` is the state at t_{i+1} = (i+1)·t_end/steps. Solver settings are
    model kwargs; :meth:`set_solver` changes them later. ``nfe`` is the number of field evaluations
    of the last forward.
    """

    def __init__(
            self,
            embed_dim: int = 256,
            num_heads: int = 4,
            mlp_ratio: float = 2.,
            depth_scale: float = 12.,
            attn_type: str = 'softmax',
            field_norm: str = 'center',
            bias: bool = False,
            reg_tokens: int = 10,
            final_norm: bool = False,
            head_init: str = 'trunc_normal',
            time_conditioned: bool = False,
            attn_drop_rate: float = 0.,
            proj_drop_rate: float = 0.,
            drop_path_rate: float = 0.,
            train_depth: Optional[Sequence[int]] = None,
            solver: Union[None, str, Dict[str, Any], SolverConfig] = None,
            device=None,
            dtype=None,
            **kwargs,
    ):
        """
        Args:
            embed_dim, num_heads, mlp_ratio: width, heads and MLP expansion of the shared field.
            depth_scale: s in ψ = s·(Attn + MLP), the reference's "emulated depth".
            attn_type: 'softmax' (reference) or 'l2' (tied-QK Lipschitz attention).
            field_norm: the field's pre-norms, 'center' (CenterNorm, the paper) or 'layer'
                (LayerNorm: scale-invariant, trains stably at the benchmark recipe, see docs/results.md).
            bias: biases in the field's linear layers (the reference has none).
            reg_tokens: learnable register tokens after [CLS] (no position embedding).
            final_norm: LayerNorm on the final state before pooling/head (after pooling for 'avg'-like
                pools unless fc_norm=False, as timm's ViT). Off in the paper and by default: measured, it
                costs 7-10 points and lets the state grow 25-180x along t.
            head_init: the classifier's initialisation (biases 0 either way): 'trunc_normal' (timm's ViT:
                truncated normal, std 0.02) or 'spectral' (the reference code: spectral norm 1 like every other
                linear). With 'spectral' the initial logits are ~3x larger and the loss's sharpness is above what
                timm's default SGD can take (train.py, lr 0.1·batch/256, momentum 0.9: NaN within ~10 updates at
                batch 32; bench/sgd_divergence.py). The function class and trained weights are the same.
            time_conditioned: non-autonomous field ψ(t, X) with a learned time code.
            attn_drop_rate, proj_drop_rate, drop_path_rate: dropouts of the field (attention, projections,
                drop-path on its branches).
            train_depth: anytime training, (lo, hi): each training forward integrates [0, t_end] in a number of
                steps drawn uniformly from lo..hi (eval uses ``steps``); None trains on the configured grid.
            solver: a :class:`SolverConfig`, a dict of its fields or a method name (default: Euler, 12 steps over
                [0, 1]); ``create_model`` also reads the flat solver kwargs of released config.json files
                (``layers.solver.FLAT_SOLVER_KWARGS``).
            kwargs: timm's VisionTransformer arguments (img_size, patch_size, in_chans, num_classes, global_pool,
                class_token, fc_norm, dynamic_img_size, dynamic_img_pad, drop_rate, pos_drop_rate, patch_drop_rate;
                :class:`ContinuousDepthViT`).
        """
        if head_init not in HEAD_INITS:
            raise ValueError(f'Unknown head_init {head_init!r}; choose one of {HEAD_INITS}')
        super().__init__(
            embed_dim=embed_dim,
            num_heads=num_heads,
            mlp_ratio=mlp_ratio,
            reg_tokens=reg_tokens,
            final_norm=final_norm,
            field_drop_rates=dict(
                attn_drop_rate=attn_drop_rate,
                proj_drop_rate=proj_drop_rate,
                drop_path_rate=drop_path_rate,
            ),
            device=device,
            dtype=dtype,
            **kwargs,
        )
        self.head_init = head_init
        field = ODEViTField(
            embed_dim,
            num_heads,
            mlp_ratio=mlp_ratio,
            depth_scale=depth_scale,
            attn_type=attn_type,
            bias=bias,
            norm=field_norm,
            attn_drop=attn_drop_rate,
            proj_drop=proj_drop_rate,
            drop_path=drop_path_rate,
            time_conditioned=time_conditioned,
            device=device,
            dtype=dtype,
        )
        self._set_depth(field, solver_config(solver), train_depth, 'steps')
        self.init_weights(needs_reset=False)  # the other modules initialised themselves

    def init_weights(self, mode: str = '', needs_reset: bool = True) -> None:
        """Spectral init of every linear/conv (as the reference code) but the classifier (``head_init``); [CLS],
        registers and position embedding truncated-normal with std 0.02, as in the reference code (``mode`` is timm's,
        unused); ``needs_reset``: the other modules (norms) reset their parameters too, as timm's ViT does, so that a
        model built on the meta device and moved with ``to_empty`` is fully initialised. On the meta device every
        step is a no-op."""
        for m in self.modules():
            reset = needs_reset and not isinstance(m, SPECTRAL_INIT_TYPES)
            if reset and hasattr(m, 'reset_parameters'):
                m.reset_parameters()
        spectral_init_(self)
        for token in (self.pos_embed, self.cls_token, self.reg_token):
            if token is not None:
                trunc_normal_(token, std=.02)
        if self.field.time_embed is not None:
            nn.init.zeros_(self.field.time_embed.proj.weight)
        if self.head_init == 'trunc_normal' and isinstance(self.head, nn.Linear):
            trunc_normal_(self.head.weight, std=.02)

    def forward(
        self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None, is_causal: bool = False
    ) -> torch.Tensor:
        """timm's; a non-finite state or logits raise FloatingPointError that also says what the field's
        weights look like, so that a training run whose updates blew the weights up is told so."""
        if torch.compiler.is_compiling():
            return super().forward(x, attn_mask=attn_mask, is_causal=is_causal)
        try:
            return super().forward(x, attn_mask=attn_mask, is_causal=is_causal)
        except FloatingPointError as e:
            raise FloatingPointError(f'{e}\n{weight_diagnosis(self)}') from e


# spectral norms of a trained field: the odevit_tiny_cifar.c10 releases (AdamW) stay below 4 (q/k blocks), the growth
# bound s·(‖W_v‖‖W_o‖ + ‖W_1‖‖W_2‖) below is 12·(0.71 + 1) ≈ 20 at the spectral init and 80-90 in those releases;
# tests/models/test_odevit.py checks the packaged release against both statements
EXPLODED_SPECTRAL_NORM = 100.


@torch.no_grad()
def weight_diagnosis(model: 'ODEViT') -> str:
    """What the field's weights say about a blow-up: their largest spectral norm and the bound
    s·(‖W_v‖‖W_o‖ + ‖W_1‖‖W_2‖) on the state's growth rate; when the weights themselves have exploded, that
    the training updates (optimiser, lr, clipping) did it, not the solver, and which recipes train."""
    field = model.field
    norms = {}
    for name, p in field.named_parameters():
        if p.ndim != 2:
            continue
        blocks = zip(('q', 'k', 'v'), p.float().chunk(3)) if name.endswith('qkv.weight') else [('', p.float())]
        for part, block in blocks:
            finite = bool(torch.isfinite(block).all())
            norms[name.replace('qkv', part)] = torch.linalg.matrix_norm(block, ord=2).item() if finite else float('inf')
    worst = max(norms, key=norms.get)
    value = norms.get('attn.v.weight', 0.) * norms.get('attn.proj.weight', 0.)
    mlp = norms.get('mlp.fc1.weight', 0.) * norms.get('mlp.fc2.weight', 0.)
    gain = field.depth_scale * (value + mlp)
    text = (
        f'ODE-ViT field weights: largest spectral norm {norms[worst]:.3g} ({worst}; 1 at initialisation, '
        f'single digits in the trained releases), state growth-rate bound s·(‖W_v‖‖W_o‖ + ‖W_1‖‖W_2‖) = '
        f'{gain:.3g} (≈ 20 at initialisation, ≈ 100 in the trained releases).'
    )
    if norms[worst] > EXPLODED_SPECTRAL_NORM:
        text += (
            ' The weights have blown up: the training updates were too large (optimiser, lr, no gradient '
            'clipping), not the solver; train with --clip-grad 1 (or AdamW).'
        )
    return text


_cfg = functools.partial(
    cifar_cfg,
    paper_ids='arXiv:2511.16501',
    paper_name='ODE-ViT: Plug & Play Attention Layer from the Generalization of the ViT as an ODE',
)


# Released weights: release/<name>.<tag>/, packaged with their config.json (the settings they were trained with).
default_cfgs = generate_default_cfgs(
    {
        'odevit_tiny_cifar.c10': _cfg(
            hf_hub_id='timm-odevit/odevit_tiny_cifar.c10',
            packaged='odevit_tiny_cifar.c10',
            label_names=CIFAR10_LABELS,
        ),
        'odevit_small_cifar': _cfg(**CIFAR100_CFG),
        'odevit_small_patch16_224': _cfg(**IMAGENET_INPUT),
        'odevit_base_patch16_224': _cfg(**IMAGENET_INPUT),
    }
)


@register_model
def odevit_tiny_cifar(pretrained: bool = False, **kwargs) -> ODEViT:
    """ODE-ViT free model for CIFAR-10 (≈0.5M params): D 256, 4 heads, MLP ×2, patch 4, 32 px."""
    model_args = dict(img_size=32, patch_size=4, embed_dim=256, num_heads=4, mlp_ratio=2.)
    return build_continuous_depth_model(
        ODEViT, 'odevit_tiny_cifar', pretrained, **dict(model_args, **kwargs)
    )


@register_model
def odevit_small_cifar(pretrained: bool = False, **kwargs) -> ODEViT:
    """ODE-ViT free model for CIFAR-100 (≈4M params): D 576, 9 heads, MLP ×4, patch 4, 32 px."""
    model_args = dict(img_size=32, patch_size=4, embed_dim=576, num_heads=9, mlp_ratio=4.)
    return build_continuous_depth_model(
        ODEViT, 'odevit_small_cifar', pretrained, **dict(model_args, **kwargs)
    )


@register_model
def odevit_small_patch16_224(pretrained: bool = False, **kwargs) -> ODEViT:
    """ODE-ViT teacher–student "Small": D 768, 12 heads, MLP ×1, patch 16, 224 px (≈3.8M trainable)."""
    model_args = dict(img_size=224, patch_size=16, embed_dim=768, num_heads=12, mlp_ratio=1.)
    return build_continuous_depth_model(
        ODEViT, 'odevit_small_patch16_224', pretrained, **dict(model_args, **kwargs)
    )


@register_model
def odevit_base_patch16_224(pretrained: bool = False, **kwargs) -> ODEViT:
    """ODE-ViT teacher–student "Base": D 768, 12 heads, MLP ×4, patch 16, 224 px (≈7M trainable)."""
    model_args = dict(img_size=224, patch_size=16, embed_dim=768, num_heads=12, mlp_ratio=4.)
    return build_continuous_depth_model(
        ODEViT, 'odevit_base_patch16_224', pretrained, **dict(model_args, **kwargs)
    )
