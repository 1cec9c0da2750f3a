"""Plug & play: replace the L blocks of a timm Vision Transformer with one continuous-depth stack.

    import timm, timm_odevit
    vit = timm.create_model('vit_small_patch16_224', pretrained=True)
    ode_vit = timm_odevit.odeify(vit, field='state_subtracted', init='mean', solver=dict(method='euler'))
    ode_vit.blocks.set_solver(method='rk4', steps=24)

The result is a copy of the model (the original is untouched) whose ``blocks`` is a
:class:`ContinuousDepthStack`: one shared field over L intervals of the solver's grid. Everything
else — patch embedding, prefix tokens, position embedding, final norm, head — is kept, so timm's
whole model API runs its own code and ``forward_intermediates`` yields ODE states. The copy is
the registered model ``vit_odeified`` (its pretrained_cfg names it, its model args record base,
field, init and solver), so ``save_for_hf`` exports it and ``create_model('local-dir:…')`` rebuilds it.

Fields: ``'state_subtracted'`` (ż = B(z) − z with B a copy of a ViT block: Euler with h = 1 and
L steps is exactly applying B L times) or ``'odevit'`` (ODE-ViT's parallel CenterNorm field, with
depth scale L; its attention/MLP weights can be initialised from the block's, its norms and
biases cannot). Initialisation: ``'block:k'`` (block k), ``'mean'`` (the parameter mean of all
blocks) or ``'random'``.
"""
import copy
import functools
import logging
from typing import Any, Dict, Optional, Sequence, Union

from torch import nn
from timm.models import (
    create_model,
    generate_default_cfgs,
    load_model_config_from_hf,
    parse_model_name,
    register_model,
    resolve_pretrained_cfg,
)
from timm.models.vision_transformer import VisionTransformer

from ..layers import BlockField, ContinuousDepthStack, SolverConfig, solver_config
from .._checks import read_config
from .._compat import recorded_model_args
from ._builder import build_continuous_depth_model
from ._cfgs import CIFAR10_LABELS, cifar_cfg
from ._from_blocks import freeze_parts, odevit_field_from, source_block
from .base import ContinuousDepthMixin

__all__ = ['odeify']
_logger = logging.getLogger(__name__)
FIELDS = ('state_subtracted', 'odevit')
_SOURCE_KEYS = ('url', 'file', 'state_dict', 'hf_hub_id', 'hf_hub_filename', 'source', 'tag')


def _odeified_cfg(base_cfg: Dict[str, Any]) -> Dict[str, Any]:
    """The base's pretrained_cfg (input size, normalisation, classifier) for architecture
    'vit_odeified', without the base's weight source (those are not the odeified model's weights)."""
    cfg = {k: v for k, v in base_cfg.items() if k not in _SOURCE_KEYS}
    return dict(cfg, architecture='vit_odeified', paper_ids='arXiv:2511.16501', custom_load=False)


@functools.lru_cache(maxsize=None)
def odeified_class(timm_class: type) -> type:
    """The class of odeify's models of a ``timm_class`` model: ``timm_class`` (its name too) under the
    :class:`ContinuousDepthMixin`, one class per ``timm_class``; pickled and copied through :func:`odeified_model`."""

    def __reduce_ex__(self, protocol):
        return odeified_model, (timm_class,), self.__getstate__()

    def record_model_args(self, args):
        """timm records the caller's ``base`` as given; a ``local-dir:`` / ``hf-hub:`` base says where its weights
        were, not what it is: the record keeps the architecture odeify read from its pretrained cfg (its model args
        are recorded beside it), so ``save_for_hf``'s folder rebuilds without the base's. The base's data config
        (mean, std, labels) and weights travel in that folder's config.json and weights, not in the model args (a
        ``features_only`` wrapper keeps timm's record, the location as given)."""
        base = args.get('base')
        if isinstance(base, str) and parse_model_name(base)[0]:
            args = dict(args, base=self.recorded_args.get('base', base))
        ContinuousDepthMixin.record_model_args(self, args)

    namespace = {
        '__module__': timm_class.__module__,
        '__qualname__': timm_class.__qualname__,
        '__doc__': timm_class.__doc__,
        '__reduce_ex__': __reduce_ex__,
        'record_model_args': record_model_args,
    }
    return type(timm_class.__name__, (ContinuousDepthMixin, timm_class), namespace)


def odeified_model(timm_class: type) -> VisionTransformer:
    """An empty instance of :func:`odeified_class` of ``timm_class``, for pickle and copy to fill in."""
    cls = odeified_class(timm_class)
    return cls.__new__(cls)


def odeify(
        model: nn.Module,
        field: str = 'state_subtracted',
        init: str = 'mean',
        solver: Optional[Union[SolverConfig, Dict[str, Any], str]] = None,
        freeze: Sequence[str] = (),
) -> VisionTransformer:
    """A copy of a timm ``VisionTransformer`` (vit_*, deit_* incl. distilled, register-token ViTs)
    whose L blocks are replaced by one shared field integrated by a :class:`ContinuousDepthStack`.

    Args:
        model: the discrete ViT (left untouched).
        field: 'state_subtracted' or 'odevit'.
        init: 'block:k', 'mean' or 'random'.
        solver: SolverConfig, dict of its fields, or a method name. Default: Euler with L steps over t ∈ [0, L]
            for 'state_subtracted' (h = 1, the discrete stack's depth), t ∈ [0, 1] for 'odevit'.
        freeze: parts of the kept shell whose weights stay fixed while the field learns, by name: modules
            (``'patch_embed'``, ``'norm'``, ``'head'``; frozen with timm's ``freeze``, batch norms included) or
            parameters (``'cls_token'``, ``'pos_embed'``). The paper's student keeps the teacher's patch embedding,
            [CLS] and classifier fixed.

    Returns:
        The converted copy, a ``vit_odeified`` model: pretrained_cfg architecture 'vit_odeified',
        model args {base, field, init, solver settings, the base's own args}; its class is the model's under
        :class:`ContinuousDepthMixin` (:func:`odeified_class`).
    """
    if not isinstance(model, VisionTransformer):
        raise TypeError(
            f'odeify needs a timm VisionTransformer (vit_*, deit_*, ...), got {type(model).__name__}'
        )
    if field not in FIELDS:
        raise ValueError(f'Unknown field {field!r}; choose one of {FIELDS}')
    blocks = model.blocks
    if isinstance(blocks, ContinuousDepthStack):
        raise ValueError('this model is already odeified')
    depth = len(blocks)
    source = source_block(blocks, init)
    if field == 'state_subtracted':  # h = 1: Euler's L steps apply the block L times
        vector_field = BlockField(source, 'state_subtracted')
        config = solver_config(solver, steps=depth, t_end=float(depth))
    else:
        vector_field = odevit_field_from(source, depth, init)
        config = solver_config(solver, steps=depth)
    # a copy without the L blocks
    converted = copy.deepcopy(model, memo={id(blocks): nn.Identity()})
    converted.__class__ = odeified_class(type(model))  # the user's timm class stays untouched
    freeze_parts(converted, freeze)
    converted.blocks = ContinuousDepthStack(vector_field, config)
    base_cfg = getattr(model, 'pretrained_cfg', None) or {}
    base = base_cfg.get('architecture')
    converted.pretrained_cfg = converted.default_cfg = _odeified_cfg(base_cfg)
    converted.record_model_args(dict(
        recorded_model_args(model), field=field, init=init,
        **({'base': base} if base else {}), **({'freeze': list(freeze)} if freeze else {})))
    return converted


def _base_cfg(base: str) -> Dict[str, Any]:
    """The pretrained cfg of a base model: a registered name's, or the one saved beside ``local-dir:`` /
    ``hf-hub:`` weights (their ``config.json``), as timm's create_model reads it."""
    source, _, where = base.partition(':')
    if source == 'local-dir':
        return read_config(where).get('pretrained_cfg') or {}
    if source == 'hf-hub':
        return load_model_config_from_hf(where)[0]
    return resolve_pretrained_cfg(base).to_dict()


# the paper's student keeps these parts of its teacher fixed (odeify's ``freeze``)
SHELL = ('patch_embed', 'cls_token', 'pos_embed', 'norm', 'head')

# vit_odeified: input size / normalisation come from the base's pretrained_cfg at creation
default_cfgs = generate_default_cfgs(
    {
        'vit_odeified': cifar_cfg(
            num_classes=1000,
            input_size=(3, 224, 224),
            crop_pct=0.9,
            mean=(0.5, 0.5, 0.5),
            std=(0.5, 0.5, 0.5),
            paper_ids='arXiv:2511.16501',
        ),
        'odevit_tiny_convstem_cifar.c10_pnp': cifar_cfg(
            hf_hub_id='timm-odevit/odevit_tiny_convstem_cifar.c10_pnp',
            packaged='odevit_tiny_convstem_cifar.c10_pnp',
            label_names=CIFAR10_LABELS,
            first_conv='patch_embed.backbone.conv',
            paper_ids='arXiv:2511.16501',
        ),
    }
)


def _create_odeified(variant: str, pretrained: bool, base: str, **kwargs) -> VisionTransformer:
    """A registered odeified model: timm ViT ``base`` created (kwargs other than odeify's and ``train_depth`` go to
    it, with the base's weights when ``pretrained`` and ``variant``'s pretrained cfg has no source of its own), then
    odeified."""
    overlay = kwargs.pop('pretrained_cfg_overlay', None)
    # a saved model's (local-dir:, hf-hub:), a tag or an explicit cfg; else vit_odeified takes the base's input size
    # and normalisation, under its own name
    cfg = kwargs.pop('pretrained_cfg', None)
    if variant == 'vit_odeified' and not cfg:
        cfg = _odeified_cfg(_base_cfg(base))
    cfg = resolve_pretrained_cfg(variant, pretrained_cfg=cfg, pretrained_cfg_overlay=overlay).to_dict()
    own_weights = pretrained and any(cfg.get(k) for k in ('url', 'file', 'state_dict', 'hf_hub_id'))
    base_pretrained = pretrained and not own_weights
    if base_pretrained and variant != 'vit_odeified':  # its base names an architecture, not trained weights
        raise ValueError(
            f'{variant} has no released weights (its pretrained cfg names no file, url or hf_hub_id): build the '
            "student in a trained ViT's shell with vit_odeified(base='local-dir:…' / 'hf-hub:…', pretrained=True)"
        )
    if base_pretrained:
        _logger.info(f'{variant}: no weights of its own in the pretrained cfg; loading {base} weights, then odeify')

    def odeified(
            field='state_subtracted',
            init='mean',
            solver=None,
            freeze=(),
            train_depth=None,
            **base_kwargs,
    ):
        """The base created (kwargs other than odeify's and ``train_depth`` are the base's), then odeified."""
        vit = create_model(
            base, pretrained=base_pretrained, cache_dir=kwargs.get('cache_dir'), **base_kwargs
        )
        model = odeify(vit, field=field, init=init, solver=solver, freeze=freeze)
        model.blocks.set_train_depth(train_depth)  # None: a fixed grid
        return model
    return build_continuous_depth_model(
        odeified,
        variant,
        own_weights,
        # (in cfg already; says what the caller set)
        pretrained_cfg=cfg,
        pretrained_cfg_overlay=overlay,
        **kwargs,
    )


@register_model
def vit_odeified(
        pretrained: bool = False,
        base: str = 'vit_tiny_patch16_224',
        **kwargs,
) -> VisionTransformer:
    """timm ViT ``base`` (a registered name, ``local-dir:`` or ``hf-hub:``; kwargs other than odeify's go to it)
    converted by odeify(field='state_subtracted', init='mean', solver=None, freeze=()) (default solver: Euler over the
    base's depth; the flat solver kwargs of the old spelling are read too, ``layers.solver.FLAT_SOLVER_KWARGS``);
    ``train_depth``: anytime training (``blocks.set_train_depth``, default None: the fixed grid).

    The paper's plug & play student, in a trained ViT's shell (its patch embedding, [CLS], position embedding, final
    norm and classifier, fixed) with a new ODE-ViT field at its width::

        timm.create_model('vit_odeified', base='local-dir:release/teacher_convstem_cifar10_cycle6', pretrained=True,
                          field='odevit', init='random', solver=dict(steps=6),
                          freeze=['patch_embed', 'cls_token', 'pos_embed', 'norm', 'head'])

    ``pretrained=True`` loads the odeified model's own weights when its pretrained_cfg has a source
    (``local-dir:``, ``hf-hub:``, a ``pretrained_cfg_overlay`` file/url); without one, the BASE's
    pretrained weights before the conversion (plug & play from train.py: ``--pretrained``)."""
    return _create_odeified('vit_odeified', pretrained, base, **kwargs)


@register_model
def odevit_tiny_convstem_cifar(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """The plug & play student of the convstem teacher (``release/teacher_convstem_cifar10_cycle6``): timm's
    ``vit_tiny_r_s16_p8_224`` shell at 32 px (ResNet stem, 1x1 patches: 64 tokens + [CLS], width 192) around an
    ODE-ViT field on 6 Euler steps over the teacher's 6 blocks. Every part trains, as in any timm model; its
    training recipe keeps the teacher's parts fixed (``freeze=SHELL``:
    train_configs/release_odevit_tiny_convstem_cifar10_cycle.yaml) and starts from the plug & play study's student
    (docs/results.md). ``pretrained=True``: the released ``c10_pnp`` weights (release/<tag>/README.md)."""
    args = dict(
        base='vit_tiny_r_s16_p8_224',
        img_size=32,
        patch_size=1,
        depth=6,
        num_classes=10,
        field='odevit',
        init='random',
    )
    return _create_odeified('odevit_tiny_convstem_cifar', pretrained, **dict(args, **kwargs))
