"""What the model families share on top of timm's ``VisionTransformer``: the base class whose
``blocks`` is a :class:`ContinuousDepthStack`, input checks, checkpoint filtering, CIFAR cfgs."""
import contextlib
import inspect
import logging
import math
import pathlib
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import torch
from torch import nn
from timm.layers import PatchEmbed, register_notrace_function, resample_abs_pos_embed, to_2tuple
from timm.models import clean_state_dict
from timm.models.vision_transformer import (
    VisionTransformer,
    checkpoint_filter_fn as vit_checkpoint_filter_fn,
)

from .._checks import check_dict, check_int, is_int, is_real, read_json
from .._compat import TimmPosEmbed, recorded_model_args, vit_pos_embed
from ..layers import ContinuousDepthStack, SolverConfig
from ..layers.depth_stack import explain_non_finite
from .base import ContinuousDepthMixin

_logger = logging.getLogger(__name__)

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
CIFAR10_LABELS = (
    'airplane',
    'automobile',
    'bird',
    'cat',
    'deer',
    'dog',
    'frog',
    'horse',
    'ship',
    'truck',
)
CIFAR100_MEAN = (0.5071, 0.4865, 0.4409)
CIFAR100_STD = (0.2673, 0.2564, 0.2762)
GLOBAL_POOL_TYPES = ('', 'token', 'avg', 'max', 'avgmax', 'map', 'prr')


PACKAGED_WEIGHTS_DIR = pathlib.Path(__file__).resolve().parents[1] / 'weights'


def packaged_weights(name: str) -> pathlib.Path:
    """Where the installed package keeps the released weights of ``name`` (``<model>.<tag>``): package data
    ``timm_odevit/weights/<name>/model.safetensors`` and the ``config.json`` beside it, byte-for-byte copies of
    ``release/<name>/``."""
    return PACKAGED_WEIGHTS_DIR / name / 'model.safetensors'


def cifar_cfg(url: str = '', packaged: str = '', **kwargs) -> Dict:
    """timm pretrained cfg for a 32 px CIFAR-10 model (override num_classes / mean / std / input_size).
    ``packaged``: the ``<model>.<tag>`` whose weights ship inside the package (:func:`packaged_weights`): its
    ``file``, which timm loads before ``hf_hub_id`` (an explicit ``hf-hub:`` name still goes to the Hub); left
    out when the file is not installed, so timm falls back to ``hf_hub_id``."""
    file = packaged_weights(packaged) if packaged else None
    if file is not None and file.is_file():
        kwargs = {'file': str(file), **kwargs}
    return {
        'url': url,
        'num_classes': 10,
        'input_size': (3, 32, 32),
        'pool_size': None,
        'crop_pct': 1.0,
        'interpolation': 'bicubic',
        # True: a model takes other sizes only when built with dynamic_img_size=True
        'fixed_input_size': True,
        'mean': CIFAR10_MEAN,
        'std': CIFAR10_STD,
        'first_conv': 'patch_embed.proj',
        'classifier': 'head',
        'license': 'apache-2.0',
        **kwargs,
    }


# ---- input -------------------------------------------------------------------------------------
@register_notrace_function  # a leaf call in torch.fx graphs: its checks stay at run time
def check_image_input(
    x: torch.Tensor,
    in_chans: int,
    img_size: Tuple[int, int],
    patch_size: Tuple[int, int],
    dynamic_img_size: bool,
    dynamic_img_pad: bool = False,
) -> None:
    """Raise ValueError for an input the model cannot take, naming what is wrong."""
    if x.ndim != 4:
        raise ValueError(
            f'expected an image batch (B, C, H, W), got a tensor of shape {tuple(x.shape)}'
        )
    if x.shape[1] != in_chans:
        raise ValueError(
            f'model takes {in_chans} input channels, got {x.shape[1]} (input shape {tuple(x.shape)})'
        )
    H, W = x.shape[-2:]
    if dynamic_img_size:
        if not dynamic_img_pad and (H % patch_size[0] or W % patch_size[1]):
            raise ValueError(
                f'image size {H}x{W} is not divisible by the patch size {patch_size[0]}x{patch_size[1]}; '
                'create the model with dynamic_img_pad=True to zero-pad it to the next multiple'
            )
    elif (H, W) != tuple(img_size):
        raise ValueError(
            f'model was built for {img_size[0]}x{img_size[1]} images, got {H}x{W}: create it with '
            f'img_size=({H}, {W}) or dynamic_img_size=True'
        )


class CheckedPatchEmbed(PatchEmbed):
    """timm's PatchEmbed, raising a ValueError that names the problem for an input it cannot take."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_image_input(
            x,
            self.proj.in_channels,
            self.img_size,
            self.patch_size,
            not self.strict_img_size,
            self.dynamic_img_pad,
        )
        return super().forward(x)


def embed_tokens(model: VisionTransformer, x: torch.Tensor) -> torch.Tensor:
    """Image (B, C, H, W) -> the initial state X(0) (B, N, D) of a timm ViT's blocks, as its
    forward_features computes it (patch embedding, prefix tokens + position embedding, norm_pre)."""
    return model.norm_pre(model.patch_drop(vit_pos_embed(model, model.patch_embed(x))))


# ---- weights -------------------------------------------------------------------------------------
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


POOLING_HEAD = ('norm.', 'fc_norm.', 'attn_pool.')


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


def saved_model_args(cfg: Dict[str, Any]) -> Dict[str, Any]:
    """The ``model_args`` of the ``config.json`` published with the weights of a resolved pretrained cfg that
    timm has not read it for (``local-dir:`` / ``hf-hub:`` names have): beside a weights ``file`` (the packaged
    releases), or on the Hub beside ``hf_hub_id``'s weights; {} when there is none."""
    if cfg.get('source') in ('local-dir', 'hf-hub'):
        return {}
    if cfg.get('file'):
        weights = pathlib.Path(cfg['file'])
        config = weights.with_name('config.json')
        if not (weights.is_file() and config.is_file()):
            return {}
        saved = read_json(config)
        return _own_model_args(cfg, saved.get('architecture'), saved.get('model_args', {}), config)
    if cfg.get('hf_hub_id'):
        from timm.models import load_model_config_from_hf
        _, architecture, model_args = load_model_config_from_hf(cfg['hf_hub_id'])
        return _own_model_args(
            cfg, architecture, model_args or {}, f'hf-hub:{cfg["hf_hub_id"]} config.json'
        )
    return {}


def _own_model_args(
    cfg: Dict[str, Any], architecture: Optional[str], model_args, source
) -> Dict[str, Any]:
    """The ``model_args`` of the config.json at ``source`` when it describes weights of ``cfg``'s architecture; a
    ValueError naming the file when they are another model's (e.g. a bViT's file in an ODE-ViT's
    ``pretrained_cfg_overlay``) or the model args are not a mapping."""
    if architecture is not None and cfg.get('architecture') not in (None, architecture):
        raise ValueError(
            f'{source} says its weights are of {architecture!r}, not of {cfg["architecture"]!r}: create '
            f'{architecture!r} with them (or load their folder as local-dir:)'
        )
    return check_dict(f'{source}: model_args', model_args)


def saved_config(cfg) -> Optional[str]:
    """The config.json a pretrained cfg was read from (``local-dir:`` / ``hf-hub:`` names), for errors; else None."""
    source = cfg.get('source') if isinstance(cfg, dict) else None
    if source == 'local-dir':
        return str(pathlib.Path(cfg.get('file', '.')) / 'config.json')
    return f'hf-hub:{cfg.get("hf_hub_id")} config.json' if source == 'hf-hub' else None


def build_continuous_depth_model(cls, variant: str, pretrained: bool, **kwargs) -> nn.Module:
    """timm's ``build_model_with_cfg`` with our checkpoint filter and getter features. With ``pretrained=True`` and a
    model class ``cls``, the ``model_args`` of the weights' own ``config.json`` (:func:`saved_model_args`) are the
    defaults, as timm's
    ``local-dir:`` applies them (explicit kwargs win), and are recorded as construction args, so ``save_for_hf``
    exports them. An error while reading the weights becomes a ValueError naming their source."""
    from timm.models import build_model_with_cfg, resolve_pretrained_cfg
    # timm's ViT kwarg: say what stands for it, not a bare TypeError
    if 'depth' in kwargs and isinstance(cls, type):
        dials = (
            'iterations=N or steps=N'
            if 'iterations' in inspect.signature(cls).parameters
            else 'steps=N'
        )
        raise TypeError(f'{variant} has no depth argument: its depth is {dials}')
    saved = {}
    # cls takes the model args
    if pretrained and 'pretrained_model_args' not in kwargs and isinstance(cls, type):
        saved = saved_model_args(resolve_pretrained_cfg(
            variant, kwargs.get('pretrained_cfg'), kwargs.get('pretrained_cfg_overlay')).to_dict())
        kwargs = dict(saved, **kwargs, pretrained_model_args=saved)
    source = saved_config(kwargs.get('pretrained_cfg'))
    if (
        isinstance(kwargs.get('pretrained_cfg'), dict)
        and kwargs['pretrained_cfg'].get('num_classes') is not None
    ):
        check_int(
            f'{source or "pretrained_cfg"}: num_classes', kwargs['pretrained_cfg']['num_classes'], 0
        )
    stage = []
    filter_fn = kwargs.pop('pretrained_filter_fn', checkpoint_filter_fn)

    def construct(**model_kwargs):  # marks where construction ends and loading the weights starts
        stage.append(cls(**model_kwargs))
        return stage[0]

    def load_filter(state_dict, model):  # ... and where loading ends
        out = filter_fn(state_dict, model)
        stage.append('loaded')
        return out
    kwargs.setdefault(
        'feature_cfg', dict(out_indices=kwargs.pop('out_indices', 3), feature_cls='getter')
    )
    try:
        model = build_model_with_cfg(
            construct, variant, pretrained, pretrained_filter_fn=load_filter, **kwargs
        )
    except Exception as e:
        # the model args come from that file
        if not stage and source and type(e) in (ValueError, TypeError):
            raise type(e)(f'{variant} with the model_args of {source}: {e}') from e
        if not pretrained or len(stage) != 1:
            raise
        cfg = stage[0].pretrained_cfg
        source = next(
            (cfg[k] for k in ('file', 'url', 'hf_hub_id') if cfg.get(k)), 'the given state_dict'
        )
        raise ValueError(
            f'could not load the pretrained weights of {variant} from {source}: {e!r}'
        ) from e
    # the input size the data pipeline resolves (train.py, timm.data.resolve_data_config) is the one the
    # model was built for (img_size / in_chans given at creation), not the registered default or a saved cfg's,
    # unless the caller overlaid one (pretrained_cfg_overlay=dict(input_size=...): timm's ViT keeps that)
    if 'input_size' not in (kwargs.get('pretrained_cfg_overlay') or {}):
        follow_input_size(model)
    if saved:  # timm's factory records only the caller's kwargs (over these)
        model.record_model_args(dict(saved, **recorded_model_args(model)))
    return model


def follow_input_size(model: nn.Module, built: Optional[Tuple[int, ...]] = None) -> None:
    """Set ``model.pretrained_cfg``'s input_size (and mean / std per channel) to what the model is built for
    (its patch embedding's in_chans and img_size). ``built``: change it only if it still says this size."""
    embed = getattr(model, 'patch_embed', None)  # None for features_only wrappers
    img_size = getattr(embed, 'img_size', None)
    if getattr(model, 'pretrained_cfg', None) is None:  # built by its class, not by timm's factory
        return
    size = (image_channels(model), *img_size) if img_size else None
    current = tuple(model.pretrained_cfg.get('input_size', ()))
    if size and current != size and (built is None or current == tuple(built)):
        model.pretrained_cfg = model.default_cfg = dict(
            model.pretrained_cfg,
            input_size=size,
            **{
                k: per_channel(model.pretrained_cfg[k], size[0])
                for k in ('mean', 'std')
                if k in model.pretrained_cfg
            },
        )


def image_channels(model: nn.Module) -> int:
    """The image channels a ViT reads: its first conv's (the pretrained cfg's ``first_conv``, e.g. a hybrid ViT's
    backbone stem), else its patch projection's."""
    first = (getattr(model, 'pretrained_cfg', None) or {}).get('first_conv')
    conv = dict(model.named_modules()).get(first) if first else None
    return getattr(conv, 'in_channels', None) or model.patch_embed.proj.in_channels


def per_channel(values: Sequence[float], channels: int) -> Tuple[float, ...]:
    """Normalization ``mean`` / ``std`` for ``channels`` input channels, as timm's ``adapt_input_conv`` maps
    an RGB first conv: one channel takes the average, more channels repeat R, G, B cyclically."""
    values = tuple(values)
    if channels == 1 and len(values) != 1:
        return (sum(values) / len(values),)
    return tuple(values[i % len(values)] for i in range(channels))


def check_probability(name: str, value) -> None:
    """A drop rate: a number in [0, 1)."""
    if not is_real(value) or not 0 <= value < 1:
        raise ValueError(f'{name} is a probability in [0, 1), got {value!r}')


def check_patch_grid(img_size, patch_size) -> None:
    """ValueError unless ``img_size`` and ``patch_size`` are positive integers (or pairs), the image size divisible by
    the patch size."""
    img = to_2tuple(img_size)
    patch = to_2tuple(patch_size)
    for name, value in (('img_size', img), ('patch_size', patch)):
        if not all(is_int(v) and v >= 1 for v in value):
            raise ValueError(f'{name} must be positive integers, got {value!r}')
    if img[0] % patch[0] or img[1] % patch[1]:
        raise ValueError(f'img_size {img} is not divisible by patch_size {patch}')


def check_architecture_args(
    img_size,
    patch_size,
    in_chans,
    num_classes,
    embed_dim,
    num_heads,
    mlp_ratio,
    reg_tokens,
    **drop_rates,
) -> None:
    """ValueError naming the argument for a ViT the arguments cannot describe (before torch fails deep inside)."""
    check_patch_grid(img_size, patch_size)
    for name, value in (('in_chans', in_chans), ('embed_dim', embed_dim), ('num_heads', num_heads)):
        check_int(name, value)
    if embed_dim % num_heads:
        raise ValueError(f'embed_dim {embed_dim} is not divisible by num_heads {num_heads}')
    if not is_real(mlp_ratio) or not math.isfinite(mlp_ratio) or int(embed_dim * mlp_ratio) < 1:
        raise ValueError(
            f'mlp_ratio must be a finite number with embed_dim·mlp_ratio >= 1, got {mlp_ratio!r}'
        )
    check_int('reg_tokens', reg_tokens, 0)
    check_int('num_classes', num_classes, 0)  # 0: no classifier, features only
    for name, value in drop_rates.items():
        check_probability(name, value)


def _check_pool(global_pool: str, has_class_token: bool) -> None:
    if global_pool not in GLOBAL_POOL_TYPES:
        raise ValueError(f'Unknown global_pool {global_pool!r}; choose one of {GLOBAL_POOL_TYPES}')
    if global_pool == 'token' and not has_class_token:
        raise ValueError("global_pool='token' needs class_token=True")


def reset_parameters_(model: nn.Module, skip: Tuple[type, ...] = ()) -> None:
    """``reset_parameters()`` of every submodule that has one, but those of the ``skip`` types (what the model's
    own init sets): what timm's ``init_weights(needs_reset=True)`` does, so that a model built on the meta device
    and moved with ``to_empty`` is fully initialised (norms, patch-embedding conv) by ``init_weights()``."""
    for m in model.modules():
        if (
            m is not model
            and not isinstance(m, skip)
            and callable(getattr(m, 'reset_parameters', None))
        ):
            m.reset_parameters()


# ---- the base class ------------------------------------------------------------------------------
class ContinuousDepthViT(ContinuousDepthMixin, TimmPosEmbed, VisionTransformer):
    """A timm ``VisionTransformer`` whose ``blocks`` is a :class:`ContinuousDepthStack`.

    Everything is timm's ViT (embedding, pooling incl. fc_norm / attention pooling, head,
    forward_features / forward_intermediates / get_intermediate_layers, prune, set_input_size,
    feature_info, group_matcher) except: registers carry no position embedding (pos_embed covers
    [CLS] + patches, the ODE-ViT reference), input errors are ValueErrors naming the problem, and
    grad checkpointing recomputes each field evaluation inside the integration. A subclass builds
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
        _check_pool(global_pool, class_token)
        check_architecture_args(
            img_size,
            patch_size,
            in_chans,
            num_classes,
            embed_dim,
            num_heads,
            mlp_ratio,
            reg_tokens,
            drop_rate=drop_rate,
            pos_drop_rate=pos_drop_rate,
            patch_drop_rate=patch_drop_rate,
            **(field_drop_rates or {}),
        )
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
            embed_layer=CheckedPatchEmbed,
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

    def _set_depth(self, field: nn.Module, solver, train_depth: Optional[Sequence[int]] = None,
                   train_dial: str = 'steps') -> None:
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
        if hasattr(self.patch_embed, 'set_grad_checkpointing'):
            self.patch_embed.set_grad_checkpointing(enable)

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
        built = (image_channels(self), *self.patch_embed.img_size)
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
        deferred = stack.defer_checks()  # the stack leaves its check of the final state to us
        try:
            out = super().forward(x, attn_mask=attn_mask, is_causal=is_causal)
        finally:
            stack.end_deferred_checks()
        finite = [torch.isfinite(t.detach()).all() for _, t in deferred] if deferred else None
        if finite is None or bool(torch.stack([*finite, torch.isfinite(out.detach()).all()]).all()):
            return out
        for x0, state in deferred:
            if not bool(torch.isfinite(state.detach()).all()):
                raise explain_non_finite(x0, stack.field, stack.solver, self)
        raise FloatingPointError(
            f'the final state is finite (max |X| = {deferred[-1][1].abs().max().item():.3g}) but '
            'the logits are not: use a smaller depth scale, more steps or a lower lr'
        )

    def reset_classifier(self, num_classes: int, global_pool: Optional[str] = None) -> None:
        check_int('num_classes', num_classes, 0)  # 0: no classifier, features only
        if global_pool is not None:
            _check_pool(global_pool, self.has_class_token)
        super().reset_classifier(num_classes, global_pool)
