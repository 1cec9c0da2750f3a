"""The base class of the model families: timm's ``VisionTransformer`` whose ``blocks`` is a
:class:`ContinuousDepthStack`. The CIFAR cfgs (:mod:`._cfgs`), the checkpoint weights (:mod:`._checkpoint`) and the
builder (:mod:`._builder`) live beside it."""
import contextlib
import math
from typing import Dict, Optional, Sequence, Tuple, Union

import torch
from torch import nn
from timm.layers import resample_abs_pos_embed, to_2tuple
from timm.models.vision_transformer import VisionTransformer

from .._checks import check_int, is_int, is_real
from .._compat import TimmPosEmbed, vit_pos_embed
from ..layers import ContinuousDepthStack, SolverConfig
from ..layers.diagnostics import explain_non_finite
from ._cfgs import follow_input_size
from .base import ContinuousDepthMixin


def embed_tokens(model: VisionTransformer, x: torch.Tensor) -> torch.Tensor:
    """Image (B, C, H, W) -> the initial state X(0) (B, N, D) of a timm ViT's blocks, as its
    forward_features computes it (patch embedding, prefix tokens + position embedding, norm_pre)."""
    return model.norm_pre(model.patch_drop(vit_pos_embed(model, model.patch_embed(x))))


@contextlib.contextmanager
def _pos_embed_prefix(model: VisionTransformer):
    """timm's pos-embed resampling counts ``num_prefix_tokens`` leading slots in pos_embed; ours
    has a slot for [CLS] only (registers carry no position embedding)."""
    saved = model.num_prefix_tokens
    model.num_prefix_tokens = int(model.has_class_token)
    try:
        yield model
    finally:
        model.num_prefix_tokens = saved


def check_patch_grid(img_size, patch_size) -> None:
    """ValueError unless ``img_size`` and ``patch_size`` are positive integers (or pairs), the image size divisible by
    the patch size (timm's patch embedding would drop the remainder)."""
    img = to_2tuple(img_size)
    patch = to_2tuple(patch_size)
    for name, value in (('img_size', img), ('patch_size', patch)):
        if not all(is_int(v) and v >= 1 for v in value):
            raise ValueError(f'{name} must be positive integers, got {value!r}')
    if img[0] % patch[0] or img[1] % patch[1]:
        raise ValueError(f'img_size {img} is not divisible by patch_size {patch}')


class ContinuousDepthViT(ContinuousDepthMixin, TimmPosEmbed, VisionTransformer):
    """A timm ``VisionTransformer`` whose ``blocks`` is a :class:`ContinuousDepthStack`.

    Everything is timm's ViT (embedding, pooling incl. fc_norm / attention pooling, head,
    forward_features / forward_intermediates / get_intermediate_layers, prune, set_input_size,
    feature_info, group_matcher, the checks of the input images) except: registers carry no position embedding
    (pos_embed covers [CLS] + patches, the ODE-ViT reference), construction arguments that would build another model
    than asked for are ValueErrors naming them, and grad checkpointing recomputes each field evaluation inside the
    integration. A subclass builds
    its field and calls :meth:`_set_depth`. What timm reads off the model after construction (feature_info, the
    recorded model args, pruning) follows the stack (:class:`ContinuousDepthMixin`).
    """

    def __init__(
            self,
            img_size: Union[int, Tuple[int, int]] = 32,
            patch_size: Union[int, Tuple[int, int]] = 4,
            in_chans: int = 3,
            num_classes: int = 10,
            global_pool: str = 'token',
            embed_dim: int = 192,
            num_heads: int = 3,
            mlp_ratio: float = 4.,
            class_token: bool = True,
            reg_tokens: int = 0,
            final_norm: bool = True,
            fc_norm: Optional[bool] = None,
            dynamic_img_size: bool = False,
            dynamic_img_pad: bool = False,
            drop_rate: float = 0.,
            pos_drop_rate: float = 0.,
            patch_drop_rate: float = 0.,
            field_drop_rates: Optional[Dict[str, float]] = None,
            device=None,
            dtype=None,
    ):
        """timm's ``VisionTransformer`` arguments (``depth`` excepted: a subclass sets the depth with
        :meth:`_set_depth`); ``field_drop_rates``: the subclass's drop rates inside the field (name -> value),
        checked here."""
        # a ViT the arguments cannot describe: a ValueError naming the argument (before torch fails deep inside, or
        # builds something else); an unknown global_pool is timm's AssertionError, which names it
        check_patch_grid(img_size, patch_size)
        check_int('in_chans', in_chans)
        check_int('embed_dim', embed_dim)
        check_int('num_heads', num_heads)
        if not is_real(mlp_ratio) or not math.isfinite(mlp_ratio) or int(embed_dim * mlp_ratio) < 1:
            raise ValueError(
                f'mlp_ratio must be a finite number with embed_dim·mlp_ratio >= 1, got {mlp_ratio!r}'
            )
        check_int('reg_tokens', reg_tokens, 0)
        check_int('num_classes', num_classes, 0)  # 0: no classifier, features only
        drop_rates = dict(
            drop_rate=drop_rate,
            pos_drop_rate=pos_drop_rate,
            patch_drop_rate=patch_drop_rate,
            **(field_drop_rates or {}),
        )
        for name, value in drop_rates.items():
            if not is_real(value) or not 0 <= value < 1:
                raise ValueError(f'{name} is a probability in [0, 1), got {value!r}')
        super().__init__(
            img_size=img_size,
            patch_size=patch_size,
            in_chans=in_chans,
            num_classes=num_classes,
            global_pool=global_pool,
            embed_dim=embed_dim,
            depth=0,
            num_heads=num_heads,
            mlp_ratio=mlp_ratio,
            class_token=class_token,
            reg_tokens=reg_tokens,
            final_norm=final_norm,
            fc_norm=fc_norm,
            dynamic_img_size=dynamic_img_size,
            dynamic_img_pad=dynamic_img_pad,
            drop_rate=drop_rate,
            pos_drop_rate=pos_drop_rate,
            patch_drop_rate=patch_drop_rate,
            weight_init='skip',
            norm_layer=nn.LayerNorm,
            device=device,
            dtype=dtype,
        )
        self.pos_embed = nn.Parameter(
            torch.zeros(
                1,
                int(class_token) + self.patch_embed.num_patches,
                embed_dim,
                device=device,
                dtype=dtype,
            )
        )

    def _set_depth(
            self,
            field: nn.Module,
            solver,
            train_depth: Optional[Sequence[int]],
            train_dial: str,
    ) -> None:
        self.blocks = ContinuousDepthStack(field, solver)
        self.blocks.set_train_depth(train_depth, train_dial)

    # ---- depth --------------------------------------------------------------------------------
    @property
    def field(self) -> nn.Module:
        """The shared vector field (block)."""
        return self.blocks.field

    @property
    def solver(self) -> Optional[SolverConfig]:
        """The ODE solver settings (None while the depth is the recurrence, whose grid counts iterations)."""
        return self.blocks.solver if self.blocks.solver.unit == 't' else None

    def set_solver(self, **changes) -> SolverConfig:
        """Change how the depth is integrated, e.g. ``set_solver(method='rk4', steps=48)`` (a bViT recurrence takes
        another method too, and its steps are its iterations); recorded in the model args that save_for_hf exports."""
        return self.blocks.set_solver(**changes)

    @property
    def train_depth(self) -> Optional[Tuple[int, int]]:
        """(lo, hi): the range each training forward draws its depth from (None: the configured grid)."""
        return self.blocks.train_depth

    def set_train_depth(self, depth_range: Optional[Sequence[int]]) -> None:
        """Anytime training (:meth:`ContinuousDepthStack.set_train_depth`); recorded in the model args."""
        self.blocks.set_train_depth(depth_range)

    @property
    def num_time_points(self) -> int:
        """Points of the trajectory after the embedding (grid points or iterates): len(blocks)."""
        return self.blocks.num_time_points

    @property
    def nfe(self) -> int:
        """Field (block) evaluations of the last forward."""
        return self.blocks.nfe

    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute each field (block) evaluation in backward instead of storing its activations.
        timm's checkpointing of whole blocks is not used: the intervals share one integration."""
        self.blocks.grad_checkpointing = enable

    # ---- tokens -------------------------------------------------------------------------------
    def embed_positions(self, x: torch.Tensor) -> torch.Tensor:
        """Patches (B, M, D) or (B, h, w, D) -> X(0) = [CLS + p_0; registers; patches + p_1..M] (B, N, D):
        registers get no position embedding (ODE-ViT reference)."""
        n_cls = int(self.has_class_token)
        pos_embed = self.pos_embed
        if self.dynamic_img_size:
            B, H, W, C = x.shape
            pos_embed = resample_abs_pos_embed(
                pos_embed,
                new_size=(H, W),
                old_size=self.patch_embed.grid_size,
                num_prefix_tokens=n_cls,
            )
            x = x.view(B, -1, C)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = x + pos_embed
        if self.reg_token is not None:
            x = torch.cat(
                [x[:, :n_cls], self.reg_token.expand(x.shape[0], -1, -1), x[:, n_cls:]], dim=1
            )
        return self.pos_drop(x)

    def set_input_size(self, img_size: Optional[Tuple[int, int]] = None, patch_size=None) -> None:
        """timm's (position embedding resampled, new size recorded in the model args); ``pretrained_cfg``'s
        input_size follows unless it said another size than the model's."""
        check_patch_grid(self.patch_embed.img_size if img_size is None else img_size,
                         self.patch_embed.patch_size if patch_size is None else patch_size)
        built = (self.in_chans, *self.patch_embed.img_size)
        with _pos_embed_prefix(self):
            super().set_input_size(img_size=img_size, patch_size=patch_size)
        # the data config follows, as save_for_hf's reload would resolve it
        follow_input_size(self, built)

    def forward(
        self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None, is_causal: bool = False
    ):
        """timm's; with the solver's ``check_finite`` on (eager mode), the final state and the logits are checked
        together, one device sync: NaN/Inf raise FloatingPointError naming the cause instead of coming back."""
        stack = self.blocks
        # e.g. nn.Sequential(*intervals): each checks its state
        if not isinstance(stack, ContinuousDepthStack):
            return super().forward(x, attn_mask=attn_mask, is_causal=is_causal)
        with stack.deferred_checks() as deferred:  # the stack leaves its check of the final state to us
            out = super().forward(x, attn_mask=attn_mask, is_causal=is_causal)
        checked = [state for _, state in deferred] + [out]
        if not deferred or bool(torch.stack([torch.isfinite(t.detach()).all() for t in checked]).all()):
            return out
        for x0, state in deferred:
            if not bool(torch.isfinite(state.detach()).all()):
                raise explain_non_finite(x0, stack.field, stack.solver, self)
        raise FloatingPointError(
            f'the final state is finite (max |X| = {deferred[-1][1].abs().max().item():.3g}) but '
            'the logits are not: use a smaller depth scale, more steps or a lower lr'
        )

    def reset_classifier(self, num_classes: int, global_pool: Optional[str] = None) -> None:
        # timm's builds no classifier for num_classes < 1 (0: features only), and checks global_pool
        check_int('num_classes', num_classes, 0)
        super().reset_classifier(num_classes, global_pool)
