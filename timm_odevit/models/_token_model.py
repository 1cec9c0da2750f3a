"""The part of a ViT that continuous-depth families share: tokens in, a trajectory, a head out.

A subclass sets ``self.ode``, the depth: an :class:`ODEBlock` or :class:`RecurrentBlock`
(``forward(x)`` -> final state, ``trajectory(x, indices)``, ``num_time_points``, ``truncate(n)``,
``nfe``, ``grad_checkpointing``); this base class provides the patch/[CLS]/register/position
embedding, the final norm and head, and the whole timm model API on top of them.
"""
from typing import Any, Dict, List, Optional, Set, Tuple, Union

import torch
import torch.fx
from torch import nn
from timm.layers import PatchEmbed, global_pool_nlc, resample_abs_pos_embed, to_2tuple, trunc_normal_
from timm.models._features import feature_take_indices

from ..layers import SolverConfig
from ._common import check_image_input, check_state_dict

GLOBAL_POOL_TYPES = ('', 'token', 'avg', 'max', 'avgmax')
torch.fx.wrap('check_image_input')  # a leaf call in FX graphs: its shape checks stay at run time


def _check_pool(global_pool: str, has_class_token: bool) -> None:
    if global_pool not in GLOBAL_POOL_TYPES:
        raise ValueError(f'Unknown global_pool {global_pool!r}; choose one of {GLOBAL_POOL_TYPES}')
    if global_pool == 'token' and not has_class_token:
        raise ValueError("global_pool='token' needs class_token=True")


class TokenTrajectoryModel(nn.Module):
    """Base for ViTs whose depth is a trajectory of token states (B, 1 + R + M, D)."""

    def __init__(
            self,
            img_size: Union[int, Tuple[int, int]],
            patch_size: Union[int, Tuple[int, int]],
            in_chans: int,
            num_classes: int,
            global_pool: str,
            embed_dim: int,
            class_token: bool,
            reg_tokens: int,
            final_norm: bool,
            norm_layer,
            dynamic_img_size: bool,
            drop_rate: float,
            pos_drop_rate: float,
            device=None,
            dtype=None,
    ):
        super().__init__()
        dd = {'device': device, 'dtype': dtype}
        _check_pool(global_pool, class_token)
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
        # position embedding covers [CLS] + patches; registers have none (ODE-ViT reference)
        self.pos_embed = nn.Parameter(torch.zeros(1, int(class_token) + self.patch_embed.num_patches, embed_dim, **dd))
        self.pos_drop = nn.Dropout(pos_drop_rate)
        self.norm = norm_layer(embed_dim, **dd) if final_norm else nn.Identity()
        self.head_drop = nn.Dropout(drop_rate)
        self.head = nn.Linear(embed_dim, num_classes, **dd) if num_classes > 0 else nn.Identity()

    @property
    def solver(self) -> Optional[SolverConfig]:
        """The ODE solver settings (None for a plain recurrence)."""
        return getattr(self.ode, 'solver', None)

    def set_solver(self, **changes) -> SolverConfig:
        """Change how the ODE is integrated, e.g. ``set_solver(method='rk4', steps=48)``."""
        if self.solver is None:
            raise ValueError(f"set_solver applies to ODE models (regime='ode'); this {type(self).__name__} is recurrent")
        return self.ode.set_solver(**changes)

    @property
    def num_time_points(self) -> int:
        """Points of the trajectory after the embedding (grid points or iterates)."""
        return self.ode.num_time_points

    def _init_tokens(self, token_std: float = 1e-6) -> None:
        """Position embedding truncated-normal (std 0.02); [CLS] / registers with ``token_std``
        (1e-6 is timm's ViT; the ODE-ViT reference uses a truncated normal with std 0.02)."""
        if not self.pos_embed.is_meta:
            trunc_normal_(self.pos_embed, std=.02)
            for token in (self.cls_token, self.reg_token):
                if token is not None:
                    trunc_normal_(token, std=token_std)

    @property
    def feature_info(self) -> List[Dict[str, Any]]:
        """One entry per time point (the continuous-depth analogue of a ViT's blocks)."""
        r = self.patch_embed.patch_size[0]
        return [dict(module=f'ode.t{i + 1}', num_chs=self.embed_dim, reduction=r) for i in range(self.num_time_points)]

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
        """Recompute each block / field evaluation in backward instead of storing its activations."""
        self.ode.grad_checkpointing = enable

    @property
    def nfe(self) -> int:
        """Block / vector-field evaluations of the last forward."""
        return self.ode.nfe

    @torch.jit.ignore
    def get_classifier(self) -> nn.Module:
        return self.head

    def _new_head(self, num_classes: int) -> nn.Module:
        ref = self.pos_embed
        head = nn.Linear(self.embed_dim, num_classes, device=ref.device, dtype=ref.dtype) \
            if num_classes > 0 else nn.Identity()
        return head.train(self.training)

    def reset_classifier(self, num_classes: int, global_pool: Optional[str] = None) -> None:
        if global_pool is not None:
            _check_pool(global_pool, self.has_class_token)
            self.global_pool = global_pool
        self.num_classes = num_classes
        self.head = self._new_head(num_classes)

    def set_input_size(self, img_size: Optional[Tuple[int, int]] = None, patch_size=None) -> None:
        """Change the input resolution, resampling the position embedding (keeps requires_grad)."""
        prev_grid = self.patch_embed.grid_size
        self.patch_embed.set_input_size(img_size=img_size, patch_size=patch_size)
        if self.patch_embed.grid_size != prev_grid:
            requires_grad = self.pos_embed.requires_grad
            self.pos_embed = nn.Parameter(resample_abs_pos_embed(
                self.pos_embed, new_size=self.patch_embed.grid_size, old_size=prev_grid,
                num_prefix_tokens=int(self.has_class_token), verbose=True), requires_grad=requires_grad)

    def _embed(self, x: torch.Tensor) -> torch.Tensor:
        """Image (B, C, H, W) -> initial state (B, 1 + R + M, D): [CLS] + registers + patches."""
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

    def _pool(self, x: torch.Tensor) -> torch.Tensor:
        return self.head_drop(global_pool_nlc(x, pool_type=self.global_pool, num_prefix_tokens=self.num_prefix_tokens))

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> final normed state (B, 1 + R + M, D)."""
        return self.norm(self.ode(self._embed(x)))

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = self._pool(x)
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
        """Token states at time points (the continuous-depth analogue of block outputs).

        Args:
            x: image batch (B, C, H, W).
            indices: 0-based time-point indices (index i is the (i+1)-th point after t = 0);
                int n = the last n, None = all.
            return_prefix_tokens: also return the [CLS]/register tokens of each state.
            norm: apply the final norm to the intermediates.
            stop_early: stop at the last requested time point.
            output_fmt: 'NCHW' (patch grid) or 'NLC' (tokens).
            intermediates_only: return only the intermediates (stops early as well).
            output_dict: return a dict like timm's ViT.
        """
        if output_fmt not in ('NCHW', 'NLC'):
            raise ValueError(f"output_fmt must be 'NCHW' or 'NLC', got {output_fmt!r}")
        num_points = self.num_time_points
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
        """Shorten the trajectory to the last wanted time point (same spacing)."""
        take_indices, max_index = feature_take_indices(self.num_time_points, indices)
        self.ode.truncate(max_index + 1)
        if prune_norm:
            self.norm = nn.Identity()
        if prune_head:
            self.reset_classifier(0, '')
        return take_indices


def checkpoint_filter_fn(state_dict: Dict[str, torch.Tensor], model: TokenTrajectoryModel) -> Dict[str, torch.Tensor]:
    """Unwrap train.py checkpoints (state_dict_ema / state_dict / model), strip DDP's 'module.',
    resample pos_embed to the model's patch grid, and refuse weights of another architecture with
    a ValueError naming the keys (before anything is copied into the model). Solver settings are
    not weights: a checkpoint trained with another solver loads."""
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
    # classifier / first conv are adapted by timm after this filter (num_classes, in_chans)
    check_state_dict(model, out, source='pretrained weights', allow=('head.', 'stage_heads.', 'patch_embed.proj.'))
    return out
