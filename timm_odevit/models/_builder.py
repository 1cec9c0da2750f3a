"""Building a continuous-depth model through timm's ``build_model_with_cfg``: the model args saved with its
weights, the checkpoint filter, and errors that name the weights' source."""
import pathlib
from typing import Any, Dict, Optional

from torch import nn
from timm.models import build_model_with_cfg, load_model_config_from_hf, resolve_pretrained_cfg

from .._checks import check_dict, check_int, read_json
from .._compat import recorded_model_args, set_recorded_model_args
from ..layers.solver import fold_flat_solver_kwargs
from ._cfgs import follow_input_size
from ._checkpoint import checkpoint_filter_fn

def saved_model_args(cfg: Dict[str, Any]) -> Dict[str, Any]:
    """The ``model_args`` of the ``config.json`` published with the weights of a resolved pretrained cfg that
    timm has not read it for (``local-dir:`` / ``hf-hub:`` names have): beside a weights ``file`` (the packaged
    releases), or on the Hub beside ``hf_hub_id``'s weights; {} when there is none. A ValueError names the file when
    they are another model's (e.g. a bViT's file in an ODE-ViT's ``pretrained_cfg_overlay``) or the model args are
    not a mapping."""
    if cfg.get('source') in ('local-dir', 'hf-hub'):
        return {}
    if cfg.get('file'):
        weights = pathlib.Path(cfg['file'])
        source = weights.with_name('config.json')
        if not (weights.is_file() and source.is_file()):
            return {}
        saved = read_json(source)
        architecture = saved.get('architecture')
        model_args = saved.get('model_args', {})
    elif cfg.get('hf_hub_id'):
        _, architecture, model_args = load_model_config_from_hf(cfg['hf_hub_id'])
        source = f'hf-hub:{cfg["hf_hub_id"]} config.json'
        model_args = model_args or {}
    else:
        return {}
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
    """timm's ``build_model_with_cfg`` with our checkpoint filter and getter features, the entry point of every
    registered model's kwargs (the matched discrete baselines' too; flat solver kwargs are folded into ``solver``
    here). With ``pretrained=True``
    and a model class ``cls``, the ``model_args`` of the weights' own ``config.json`` (:func:`saved_model_args`) are
    the defaults, as timm's ``local-dir:`` applies them (explicit kwargs win), and are recorded as construction
    args, so ``save_for_hf`` exports them. An error while reading the weights becomes a ValueError naming their
    source."""
    saved = {}
    # cls takes the model args
    if pretrained and 'pretrained_model_args' not in kwargs and isinstance(cls, type):
        saved = saved_model_args(resolve_pretrained_cfg(
            variant, kwargs.get('pretrained_cfg'), kwargs.get('pretrained_cfg_overlay')).to_dict())
        kwargs = dict(saved, **kwargs, pretrained_model_args=saved)
    given_cfg = kwargs.get('pretrained_cfg')
    source = saved_config(given_cfg)
    # timm compares it with the model's to keep or drop the classifier: a malformed one would drop it silently
    if isinstance(given_cfg, dict) and given_cfg.get('num_classes') is not None:
        check_int(f'{source or "pretrained_cfg"}: num_classes', given_cfg['num_classes'], 0)
    stage = []

    def construct(**model_kwargs):  # marks where construction ends and loading the weights starts
        stage.append(cls(**fold_flat_solver_kwargs(model_kwargs)))
        return stage[0]

    def load_filter(state_dict, model):  # ... and where loading ends
        out = checkpoint_filter_fn(state_dict, model)
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
        # the model args come from that file, or from kwargs the caller gave over them: name both sources
        if not stage and source and type(e) in (ValueError, TypeError):
            raise type(e)(f'{variant} with the model_args of {source} (and any kwargs given over them): {e}') from e
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
        set_recorded_model_args(model, dict(saved, **recorded_model_args(model)))
    return model
