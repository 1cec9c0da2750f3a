"""ODE-ViT: a Vision Transformer as a well-posed ODE over its tokens.

Paper: "ODE-ViT: Plug & Play Attention Layer from the Generalization of the ViT as an Ordinary
Differential Equation", Riera, Boned, Terrades, arXiv 2511.16501. Reference code: Bycarkos/ODE-ViT.

The L blocks of a ViT become one shared vector field integrated over t ∈ [0, 1]:

    X(0) = [CLS; registers; patches] + pos,   dX/dt = ψ(t, X),   logits = head(pool(norm(X(1))))

Differences from the reference code (SPEC.md): every linear/conv is spectrally initialised
(including the attention in-projection), the head has a final norm by default, solver
settings are changeable after training, and a blow-up raises an error instead of NaN logits.
"""
from typing import Any, Dict, List, Optional, Set, Tuple, Union

import torch
from torch import nn
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.layers import PatchEmbed, global_pool_nlc, resample_abs_pos_embed, to_2tuple, trunc_normal_
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from timm.models._features import feature_take_indices

from ..layers import ODEBlock, ODEViTField, SolverConfig, spectral_init_
from ._common import CIFAR10_MEAN, CIFAR10_STD, CIFAR100_MEAN, CIFAR100_STD, check_image_input

__all__ = ['ODEViT']

GLOBAL_POOL_TYPES = ('', 'token', 'avg', 'max', 'avgmax')


class ODEViT(nn.Module):
    """Continuous-depth Vision Transformer (ODE-ViT).

    Tokens are [CLS] + ``reg_tokens`` registers (no position embedding) + M patches, shape
    (B, 1 + R + M, D). They are integrated through one shared :class:`ODEViTField` by an
    :class:`ODEBlock`; solver settings are model kwargs and :meth:`set_solver` changes them later.
    ``self.nfe`` is the number of field evaluations of the last forward.
    """

    def __init__(
            self,
            img_size: Union[int, Tuple[int, int]] = 32,
            patch_size: Union[int, Tuple[int, int]] = 4,
            in_chans: int = 3,
            num_classes: int = 10,
            global_pool: str = 'token',
            embed_dim: int = 256,
            num_heads: int = 4,
            mlp_ratio: float = 2.,
            depth_scale: float = 12.,
            attn_type: str = 'softmax',
            bias: bool = False,
            class_token: bool = True,
            reg_tokens: int = 10,
            final_norm: bool = True,
            time_conditioned: bool = False,
            dynamic_img_size: bool = False,
            solver: str = 'euler',
            steps: int = 12,
            step_size: Optional[float] = None,
            rtol: float = 1e-3,
            atol: float = 1e-4,
            adjoint: bool = False,
            check_finite: bool = True,
            solver_options: Optional[Dict[str, Any]] = None,
            drop_rate: float = 0.,
            pos_drop_rate: float = 0.,
            attn_drop_rate: float = 0.,
            proj_drop_rate: float = 0.,
            drop_path_rate: float = 0.,
            device=None,
            dtype=None,
    ):
        """
        Args:
            img_size: input size, int or (H, W).
            patch_size: patch size, int or (H, W).
            in_chans, num_classes: input channels and classes (0 for no classifier).
            global_pool: '' | 'token' | 'avg' | 'max' | 'avgmax'.
            embed_dim, num_heads, mlp_ratio: width, heads and MLP expansion of the shared field.
            depth_scale: s in ψ = s·(Attn + MLP), the reference's "emulated depth".
            attn_type: 'softmax' (reference) or 'l2' (tied-QK Lipschitz attention).
            bias: biases in the field's linear layers (the reference has none).
            class_token, reg_tokens: prefix tokens ([CLS] and learnable registers).
            final_norm: LayerNorm on the final state before pooling/head.
            time_conditioned: non-autonomous field ψ(t, X) with a learned time code.
            dynamic_img_size: accept any input size divisible by the patch (pos-embed resampled).
            solver, steps, step_size, rtol, atol, adjoint, check_finite, solver_options: the
                :class:`SolverConfig` (method = ``solver``, options = ``solver_options``).
            drop_rate, pos_drop_rate, attn_drop_rate, proj_drop_rate, drop_path_rate: dropouts
                (head, tokens, attention, projections, and drop-path on the field's branches).
        """
        super().__init__()
        dd = {'device': device, 'dtype': dtype}
        if global_pool not in GLOBAL_POOL_TYPES:
            raise ValueError(f'Unknown global_pool {global_pool!r}; choose one of {GLOBAL_POOL_TYPES}')
        if global_pool == 'token' and not class_token:
            raise ValueError("global_pool='token' needs class_token=True")
        if reg_tokens < 0:
            raise ValueError(f'reg_tokens must be >= 0, got {reg_tokens}')
        img_size, patch_size = to_2tuple(img_size), to_2tuple(patch_size)
        if img_size[0] % patch_size[0] or img_size[1] % patch_size[1]:
            raise ValueError(f'img_size {img_size} is not divisible by patch_size {patch_size}')
        self.num_classes = num_classes
        self.in_chans = in_chans
        self.global_pool = global_pool
        self.num_features = self.head_hidden_size = self.embed_dim = embed_dim
        self.has_class_token = class_token
        self.num_reg_tokens = reg_tokens
        self.num_prefix_tokens = int(class_token) + reg_tokens
        self.dynamic_img_size = dynamic_img_size

        self.patch_embed = PatchEmbed(
            img_size=img_size, patch_size=patch_size, in_chans=in_chans, embed_dim=embed_dim,
            strict_img_size=False, output_fmt='NHWC' if dynamic_img_size else None,
            flatten=not dynamic_img_size, **dd)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim, **dd)) if class_token else None
        self.reg_token = nn.Parameter(torch.zeros(1, reg_tokens, embed_dim, **dd)) if reg_tokens else None
        # position embedding covers [CLS] + patches; registers have none (reference)
        self.pos_embed = nn.Parameter(torch.zeros(1, int(class_token) + self.patch_embed.num_patches, embed_dim, **dd))
        self.pos_drop = nn.Dropout(pos_drop_rate)

        field = ODEViTField(
            embed_dim, num_heads, mlp_ratio=mlp_ratio, depth_scale=depth_scale, attn_type=attn_type, bias=bias,
            attn_drop=attn_drop_rate, proj_drop=proj_drop_rate, drop_path=drop_path_rate,
            time_conditioned=time_conditioned, **dd)
        self.ode = ODEBlock(field, SolverConfig(
            method=solver, steps=steps, step_size=step_size, rtol=rtol, atol=atol, adjoint=adjoint,
            check_finite=check_finite, options=dict(solver_options or {})))
        self.norm = nn.LayerNorm(embed_dim, **dd) if final_norm else nn.Identity()
        self.head_drop = nn.Dropout(drop_rate)
        self.head = nn.Linear(embed_dim, num_classes, **dd) if num_classes > 0 else nn.Identity()
        self.init_weights()

    def init_weights(self) -> None:
        """Spectral init of every linear/conv (SPEC §1); tokens as in timm's ViT."""
        spectral_init_(self)
        if not self.pos_embed.is_meta:
            trunc_normal_(self.pos_embed, std=.02)
            for token in (self.cls_token, self.reg_token):
                if token is not None:
                    nn.init.normal_(token, std=1e-6)
            if self.field.time_embed is not None:
                nn.init.zeros_(self.field.time_embed.proj.weight)

    # ---- solver ------------------------------------------------------------------------------
    @property
    def field(self) -> ODEViTField:
        return self.ode.field

    @property
    def solver(self) -> SolverConfig:
        return self.ode.solver

    def set_solver(self, **changes) -> SolverConfig:
        """Change how the ODE is integrated, e.g. ``set_solver(method='rk4', steps=48)``."""
        return self.ode.set_solver(**changes)

    @property
    def nfe(self) -> int:
        """Vector-field evaluations of the last forward."""
        return self.ode.nfe

    @property
    def feature_info(self) -> List[Dict[str, Any]]:
        """One entry per grid time point t_1..t_steps (the ODE analogue of a ViT's blocks)."""
        r = self.patch_embed.patch_size[0]
        return [dict(module=f'ode.t{i + 1}', num_chs=self.embed_dim, reduction=r) for i in range(self.ode.num_time_points)]

    # ---- timm model API ------------------------------------------------------------------------
    @torch.jit.ignore
    def no_weight_decay(self) -> Set[str]:
        return {'pos_embed', 'cls_token', 'reg_token'}

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> Dict[str, Any]:
        return dict(
            stem=r'^cls_token|reg_token|pos_embed|patch_embed',
            blocks=[(r'^ode\.', (0,)), (r'^norm', (99999,))],
        )

    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute each field evaluation in backward instead of storing its activations."""
        self.ode.grad_checkpointing = enable

    @torch.jit.ignore
    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: Optional[str] = None) -> None:
        if global_pool is not None:
            if global_pool not in GLOBAL_POOL_TYPES:
                raise ValueError(f'Unknown global_pool {global_pool!r}; choose one of {GLOBAL_POOL_TYPES}')
            if global_pool == 'token' and not self.has_class_token:
                raise ValueError("global_pool='token' needs a class token")
            self.global_pool = global_pool
        self.num_classes = num_classes
        ref = self.pos_embed
        self.head = nn.Linear(self.embed_dim, num_classes, device=ref.device, dtype=ref.dtype) \
            if num_classes > 0 else nn.Identity()
        self.head.train(self.training)

    def set_input_size(self, img_size: Optional[Tuple[int, int]] = None, patch_size=None) -> None:
        """Change the input resolution, resampling the position embedding (keeps requires_grad)."""
        prev_grid = self.patch_embed.grid_size
        self.patch_embed.set_input_size(img_size=img_size, patch_size=patch_size)
        if self.patch_embed.grid_size != prev_grid:
            requires_grad = self.pos_embed.requires_grad
            self.pos_embed = nn.Parameter(resample_abs_pos_embed(
                self.pos_embed, new_size=self.patch_embed.grid_size, old_size=prev_grid,
                num_prefix_tokens=int(self.has_class_token), verbose=True), requires_grad=requires_grad)

    # ---- forward -------------------------------------------------------------------------------
    def _embed(self, x: torch.Tensor) -> torch.Tensor:
        """Image (B, C, H, W) -> initial state X(0) (B, 1 + R + M, D)."""
        check_image_input(x, self.in_chans, self.patch_embed.img_size, self.patch_embed.patch_size,
                          self.dynamic_img_size)
        x = self.patch_embed(x)
        pos_embed = self.pos_embed
        if self.dynamic_img_size:
            B, H, W, C = x.shape
            pos_embed = resample_abs_pos_embed(
                pos_embed, new_size=(H, W), old_size=self.patch_embed.grid_size,
                num_prefix_tokens=int(self.has_class_token))
            x = x.reshape(B, H * W, C)
        B = x.shape[0]
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(B, -1, -1), x], dim=1)
        x = x + pos_embed
        if self.reg_token is not None:
            n_cls = int(self.has_class_token)
            x = torch.cat([x[:, :n_cls], self.reg_token.expand(B, -1, -1), x[:, n_cls:]], dim=1)
        return self.pos_drop(x)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> final normed state (B, 1 + R + M, D)."""
        return self.norm(self.ode(self._embed(x)))

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = global_pool_nlc(x, pool_type=self.global_pool, num_prefix_tokens=self.num_prefix_tokens)
        x = self.head_drop(x)
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def forward_intermediates(
            self,
            x: torch.Tensor,
            indices: Optional[Union[int, List[int]]] = None,
            return_prefix_tokens: bool = False,
            norm: bool = False,
            stop_early: bool = False,
            output_fmt: str = 'NCHW',
            intermediates_only: bool = False,
            output_dict: bool = False,
    ) -> Union[List[torch.Tensor], Tuple[torch.Tensor, List[torch.Tensor]], Dict[str, Any]]:
        """ODE states at grid time points.

        Args:
            x: image batch (B, C, H, W).
            indices: time-point indices into t_1..t_steps (index i is t_{i+1} = (i+1)·t_end/steps);
                int n = the last n, None = all.
            return_prefix_tokens: also return the [CLS]/register tokens of each state.
            norm: apply the final norm to the intermediates.
            stop_early: integrate only up to the last requested time point.
            output_fmt: 'NCHW' (patch grid) or 'NLC' (tokens).
            intermediates_only: return only the intermediates (integration stops early).
            output_dict: return a dict like timm's ViT.
        """
        if output_fmt not in ('NCHW', 'NLC'):
            raise ValueError(f"output_fmt must be 'NCHW' or 'NLC', got {output_fmt!r}")
        num_points = self.ode.num_time_points
        take_indices, max_index = feature_take_indices(num_points, indices)
        B, _, height, width = x.shape
        x = self._embed(x)

        last = max_index if (stop_early or intermediates_only) else num_points - 1
        query = sorted(set(take_indices) | {last})
        states = self.ode.trajectory(x, query)
        intermediates = [states[query.index(i)] for i in take_indices]
        intermediates = [self.norm(y) if norm else y for y in intermediates]
        x = states[-1]

        prefix_tokens = [y[:, :self.num_prefix_tokens] for y in intermediates]
        intermediates = [y[:, self.num_prefix_tokens:] for y in intermediates]
        if output_fmt == 'NCHW':
            H, W = self.patch_embed.dynamic_feat_size((height, width))
            intermediates = [y.reshape(B, H, W, -1).permute(0, 3, 1, 2).contiguous() for y in intermediates]

        if output_dict:
            result = {'image_intermediates': intermediates}
            if return_prefix_tokens and self.num_prefix_tokens:
                result['image_intermediates_prefix'] = prefix_tokens
            if not intermediates_only:
                result['image_features'] = self.norm(x)
            return result
        if return_prefix_tokens and self.num_prefix_tokens:
            intermediates = list(zip(intermediates, prefix_tokens))
        if intermediates_only:
            return intermediates
        return self.norm(x), intermediates

    def prune_intermediate_layers(
            self,
            indices: Union[int, List[int]] = 1,
            prune_norm: bool = False,
            prune_head: bool = True,
    ) -> List[int]:
        """Shorten the integration horizon to the last wanted time point (same step length)."""
        take_indices, max_index = feature_take_indices(self.ode.num_time_points, indices)
        self.ode.set_solver(t_end=self.solver.h * (max_index + 1), steps=max_index + 1)
        if prune_norm:
            self.norm = nn.Identity()
        if prune_head:
            self.reset_classifier(0, '')
        return take_indices


def checkpoint_filter_fn(state_dict: Dict[str, torch.Tensor], model: ODEViT) -> Dict[str, torch.Tensor]:
    """Unwrap train.py checkpoints (state_dict / state_dict_ema / model) and resample pos_embed."""
    for key in ('state_dict_ema', 'state_dict', 'model'):
        if key in state_dict and isinstance(state_dict[key], dict):
            state_dict = state_dict[key]
            break
    out = {}
    for k, v in state_dict.items():
        k = k[len('module.'):] if k.startswith('module.') else k
        if k == 'pos_embed' and v.shape != model.pos_embed.shape and v.ndim == 3:
            num_prefix = int(model.has_class_token)
            old = int((v.shape[1] - num_prefix) ** 0.5)
            v = resample_abs_pos_embed(
                v, new_size=model.patch_embed.grid_size, old_size=(old, old),
                num_prefix_tokens=num_prefix, verbose=True)
        out[k] = v
    return out


def _cfg(url: str = '', **kwargs) -> Dict[str, Any]:
    return {
        'url': url,
        'num_classes': 10,
        'input_size': (3, 32, 32),
        'pool_size': None,
        'crop_pct': 1.0,
        'interpolation': 'bicubic',
        'fixed_input_size': True,
        'mean': CIFAR10_MEAN,
        'std': CIFAR10_STD,
        'first_conv': 'patch_embed.proj',
        'classifier': 'head',
        'license': 'apache-2.0',
        'paper_ids': 'arXiv:2511.16501',
        'paper_name': 'ODE-ViT: Plug & Play Attention Layer from the Generalization of the ViT as an ODE',
        **kwargs,
    }


default_cfgs = generate_default_cfgs({
    'odevit_tiny_cifar': _cfg(),
    'odevit_small_cifar': _cfg(num_classes=100, mean=CIFAR100_MEAN, std=CIFAR100_STD),
    'odevit_small_patch16_224': _cfg(
        input_size=(3, 224, 224), mean=IMAGENET_DEFAULT_MEAN, std=IMAGENET_DEFAULT_STD),
    'odevit_base_patch16_224': _cfg(
        input_size=(3, 224, 224), mean=IMAGENET_DEFAULT_MEAN, std=IMAGENET_DEFAULT_STD),
})


def _create_odevit(variant: str, pretrained: bool = False, **kwargs) -> ODEViT:
    out_indices = kwargs.pop('out_indices', 3)
    return build_model_with_cfg(
        ODEViT, variant, pretrained,
        pretrained_filter_fn=checkpoint_filter_fn,
        feature_cfg=dict(out_indices=out_indices, feature_cls='getter'),
        **kwargs,
    )


@register_model
def odevit_tiny_cifar(pretrained: bool = False, **kwargs) -> ODEViT:
    """ODE-ViT free model for CIFAR-10 (≈0.5M params): D 256, 4 heads, MLP ×2, patch 4, 32 px."""
    model_args = dict(img_size=32, patch_size=4, embed_dim=256, num_heads=4, mlp_ratio=2.)
    return _create_odevit('odevit_tiny_cifar', pretrained=pretrained, **dict(model_args, **kwargs))


@register_model
def odevit_small_cifar(pretrained: bool = False, **kwargs) -> ODEViT:
    """ODE-ViT free model for CIFAR-100 (≈4M params): D 576, 9 heads, MLP ×4, patch 4, 32 px."""
    model_args = dict(img_size=32, patch_size=4, embed_dim=576, num_heads=9, mlp_ratio=4.)
    return _create_odevit('odevit_small_cifar', pretrained=pretrained, **dict(model_args, **kwargs))


@register_model
def odevit_small_patch16_224(pretrained: bool = False, **kwargs) -> ODEViT:
    """ODE-ViT teacher–student "Small": D 768, 12 heads, MLP ×1, patch 16, 224 px (≈3.8M trainable)."""
    model_args = dict(img_size=224, patch_size=16, embed_dim=768, num_heads=12, mlp_ratio=1.)
    return _create_odevit('odevit_small_patch16_224', pretrained=pretrained, **dict(model_args, **kwargs))


@register_model
def odevit_base_patch16_224(pretrained: bool = False, **kwargs) -> ODEViT:
    """ODE-ViT teacher–student "Base": D 768, 12 heads, MLP ×4, patch 16, 224 px (≈7M trainable)."""
    model_args = dict(img_size=224, patch_size=16, embed_dim=768, num_heads=12, mlp_ratio=4.)
    return _create_odevit('odevit_base_patch16_224', pretrained=pretrained, **dict(model_args, **kwargs))
