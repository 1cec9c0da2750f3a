"""Every private interface of torch, timm, torchdiffeq and argparse that timm_odevit relies on, in one place.

Each has a test in ``tests/test_compat.py`` that fails when upstream renames or removes it.
"""
import argparse
from typing import Any, Callable, Dict, List

import torch
from torch import nn
from torch.nn.modules import module as torch_module

# torchdiffeq reports a failed adaptive step ('underflow in dt nan') with an assert, not an exception of its own
ODE_SOLVE_FAILURES = (AssertionError,)


# ---- torch ---------------------------------------------------------------------------------------------------
def has_module_hooks(module: nn.Module) -> bool:
    """Whether forward or backward hooks (or pre-hooks) are registered on ``module``."""
    return bool(
        module._forward_hooks
        or module._forward_pre_hooks
        or module._backward_hooks
        or module._backward_pre_hooks
    )


def has_global_module_hooks() -> bool:
    """Whether global module hooks (``torch.nn.modules.module.register_module_*_hook``) are registered: they fire
    on every module call."""
    return bool(
        torch_module._global_forward_hooks
        or torch_module._global_forward_pre_hooks
        or torch_module._global_backward_hooks
        or torch_module._global_backward_pre_hooks
    )


# ---- timm ----------------------------------------------------------------------------------------------------
def recorded_model_args(model: nn.Module) -> Dict[str, Any]:
    """The construction args timm's ``create_model`` recorded on ``model`` (what ``get_model_args`` and
    ``save_for_hf`` export); {} for a model built by its class."""
    return dict(getattr(model, '_model_args', {}))


def set_recorded_model_args(model: nn.Module, args: Dict[str, Any]) -> None:
    """Replace that record: timm's attribute, which our families keep with their own ``record_model_args``
    (:class:`TimmModelArgs`) and a ``features_only`` wrapper of one of them holds itself."""
    model._model_args = dict(args)


class TimmModelArgs:
    """Mixin: timm's record of a model's construction args (``create_model`` writes it, ``get_model_args`` and
    ``save_for_hf`` read it) kept by the class's own ``model_args()`` and ``record_model_args(args)``."""

    @property
    def _model_args(self) -> Dict[str, Any]:
        return self.model_args()

    @_model_args.setter
    def _model_args(self, args: Dict[str, Any]) -> None:
        self.record_model_args(args)


def vit_pos_embed(vit: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A timm ``VisionTransformer``'s prefix tokens and position embedding added to its patch tokens, as its
    ``forward_features`` adds them."""
    return vit._pos_embed(x)


class TimmPosEmbed:
    """Mixin for a timm ``VisionTransformer`` subclass: ``forward_features`` adds the prefix tokens and position
    embedding with the class's own ``embed_positions(x)``."""

    def _pos_embed(self, x: torch.Tensor) -> torch.Tensor:
        return self.embed_positions(x)


def replace_train_parse_args(train_module: Any, parse_args: Callable) -> Callable:
    """Make ``parse_args`` the function timm's train.py parses its command line with (``() -> (args, args_text)``);
    returns the one it replaces."""
    original = train_module._parse_args
    train_module._parse_args = parse_args
    return original


# ---- argparse ------------------------------------------------------------------------------------------------
def parser_actions(parser: argparse.ArgumentParser) -> List[argparse.Action]:
    """The actions of ``parser``, its groups' included (argparse has no public list of them)."""
    return list(parser._actions)
