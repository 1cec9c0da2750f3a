"""Diagnostics of a continuous-depth stack: what makes its field random (dropout, drop-path), masks it cannot
take, hooks on its intervals, and the cause of a non-finite state."""
from typing import List, Optional, Sequence

import torch
from torch import nn

from .._compat import has_global_module_hooks, has_module_hooks
from .solver import SolverConfig

_DROPOUTS = (
    nn.Dropout,
    nn.Dropout1d,
    nn.Dropout2d,
    nn.Dropout3d,
    nn.AlphaDropout,
    nn.FeatureAlphaDropout,
)


def active_stochastic_modules(module: nn.Module) -> List[str]:
    """Names of the submodules that make ``module`` random in its current mode: dropout with p > 0
    and drop-path / drop-block (timm's ``drop_prob``) with drop_prob > 0, in training mode."""
    return [
        name or type(module).__name__
        for name, m in module.named_modules()
        if m.training and (m.p if isinstance(m, _DROPOUTS) else getattr(m, 'drop_prob', 0)) > 0
    ]


def check_no_mask(attn_mask: Optional[torch.Tensor], is_causal: bool) -> None:
    if attn_mask is not None or is_causal:
        raise ValueError(
            'a continuous-depth stack attends over all tokens and takes no attention masks: drop them'
        )


def any_hooks(stack: nn.Module) -> bool:
    """Hooks on an interval of ``stack``, or global module hooks, which fire on every module call and so on the
    intervals too."""
    return any(map(has_module_hooks, stack)) or has_global_module_hooks()


def _non_finite_parameters(module: nn.Module, skip: Sequence[nn.Parameter] = ()) -> List[str]:
    skipped = set(map(id, skip))
    names = [
        n
        for n, p in module.named_parameters()
        if id(p) not in skipped and not p.is_meta and not bool(torch.isfinite(p).all())
    ]
    return names[:4] + ([f'+{len(names) - 4} more'] if len(names) > 4 else [])


def explain_non_finite(
    x0: torch.Tensor,
    field: nn.Module,
    config: SolverConfig,
    model: Optional[nn.Module] = None,
    error: Optional[Exception] = None,
) -> FloatingPointError:
    """The error for a non-finite ODE state from ``x0``, naming its cause when it is not the dynamics (non-finite
    weights or input, float16 overflow, adaptive step control in half precision). Runs on the error path only."""
    bad = _non_finite_parameters(field)
    if bad:
        return FloatingPointError(
            f"the ODE field's weights hold NaN/Inf ({', '.join(bad)}): load sound weights, call "
            'init_weights() after to_empty, or lower the lr if training diverged'
        )
    if not bool(torch.isfinite(x0).all()):
        bad = _non_finite_parameters(model, skip=list(field.parameters())) if model is not None else []
        if bad:
            cause = f'the model\'s weights hold NaN/Inf ({", ".join(bad)})'
        # a stack called outside its model's forward: the weights before it are not known here
        elif model is None:
            cause = (
                'the input images hold NaN/Inf (check torch.isfinite(images).all()), or the weights before the '
                'depth do'
            )
        else:
            cause = 'the input images hold NaN/Inf (check torch.isfinite(images).all())'
        return FloatingPointError(
            f'the state entering the ODE already holds NaN/Inf, so the dynamics are not the '
            f'cause: {cause}'
        )
    device = x0.device.type
    dtypes = {
        x0.dtype,
        torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x0.dtype,
    }
    if error is not None:  # a failed adaptive solve
        half = ': the adaptive step-size control failed in half precision: integrate in float32 or use a fixed grid'
        return FloatingPointError(
            f'{error}' + (half if dtypes & {torch.float16, torch.bfloat16} else '')
        )
    if torch.float16 in dtypes:
        return FloatingPointError(
            f'ODE state became non-finite (NaN/Inf) with {config.describe()} in float16 '
            '(values above 65504 overflow): use bfloat16 or float32'
        )
    return FloatingPointError(
        f'ODE state became non-finite (NaN/Inf) with {config.describe()}: the dynamics blew up, '
        'so use more steps, a stabler solver or a smaller depth scale (or check_finite=False)'
    )
