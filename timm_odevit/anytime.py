"""Anytime inference: depth as a dial at run time, from one checkpoint.

Two ways to spend less compute than the model's grid:

* **Early exit** (:func:`early_exit`): integrate interval by interval on the model's own grid; after
  every interval the head reads the state, and each image stops as soon as its prediction has settled
  under a stated :class:`ExitRule` (:class:`Settled`: the argmax stayed the same for ``patience``
  consecutive steps; :class:`Confident`: the top softmax probability reached ``threshold``; rules
  combine with ``|`` and ``&``). Finished images leave the batch, so later field evaluations run on
  fewer images and wall time falls with the NFE. Returns the predictions and the NFE each image used.
* **A fixed budget** (:func:`accuracy_at_budgets`, :func:`best_grid_for_budget`, from :mod:`.evaluation`): top-1 at several
  grids, *measured on the data you pass* (nothing is stored with the weights), and the best measured
  grid within a budget of field evaluations per image.

    import timm, timm_odevit
    from timm_odevit.anytime import early_exit, Settled, Confident
    model = timm.create_model('odevit_tiny_cifar.c10', pretrained=True).eval()
    pred, logits, nfe, steps = early_exit(model, images, rule=Settled(patience=2) | Confident(0.9))
"""
from typing import NamedTuple, Optional

import torch
from torch import nn

from ._checks import check_int, is_int, is_real
from .evaluation import accuracy_at_budgets, best_grid_for_budget, eval_mode  # noqa: F401  (part of this API)
from .layers.depth_stack import depth_stack
from .models._common import embed_tokens

__all__ = [
    'ExitRule', 'Settled', 'Confident', 'Readout', 'EarlyExit', 'early_exit',
    'accuracy_at_budgets', 'best_grid_for_budget',
]


# ---- exit rules ----------------------------------------------------------------------------------
class Readout(NamedTuple):
    """What an :class:`ExitRule` sees after interval ``step`` (1-based) for the images still running.

    ``logits`` (b, C); ``probs`` their softmax; ``prediction`` (b,) the argmax; ``unchanged`` (b,) the
    number of consecutive steps, ending at this one, over which the prediction did not change (0 at
    step 1 or right after a change)."""
    step: int
    logits: torch.Tensor
    probs: torch.Tensor
    prediction: torch.Tensor
    unchanged: torch.Tensor


class ExitRule:
    """When an image may stop: ``rule(readout)`` -> bool tensor (b,), True = settled, stop now.

    Rules are stateless (the per-image history is in the :class:`Readout`) and combine with ``|``
    (either fires) and ``&`` (both fire). Subclass and define ``__call__`` for a rule of your own."""

    def __call__(self, readout: Readout) -> torch.Tensor:
        raise NotImplementedError

    def __or__(self, other: 'ExitRule') -> 'ExitRule':
        return _Combined(self, _check_rule(other), '|')

    def __and__(self, other: 'ExitRule') -> 'ExitRule':
        return _Combined(self, _check_rule(other), '&')


class Settled(ExitRule):
    """Stop once the argmax has stayed the same over ``patience`` consecutive steps, i.e. the last
    ``patience + 1`` readouts agree (the patience rule of PABEE, Zhou et al. 2020). An image stops
    after ``patience + 1`` steps at the earliest."""

    def __init__(self, patience: int = 2):
        # steps with an unchanged prediction
        self.patience = check_int('Settled(patience=...)', patience)

    def __call__(self, readout: Readout) -> torch.Tensor:
        return readout.unchanged >= self.patience

    def __repr__(self) -> str:
        return f'Settled(patience={self.patience})'


class Confident(ExitRule):
    """Stop once the top softmax probability of the head reaches ``threshold`` (0 < threshold <= 1)."""

    def __init__(self, threshold: float = 0.9):
        if not is_real(threshold) or not 0 < threshold <= 1:  # NaN and inf fail too
            raise ValueError(
                f'Confident(threshold=...) must be a probability in (0, 1], got {threshold!r}'
            )
        self.threshold = float(threshold)

    def __call__(self, readout: Readout) -> torch.Tensor:
        return readout.probs.amax(dim=-1) >= self.threshold

    def __repr__(self) -> str:
        return f'Confident(threshold={self.threshold:g})'


class _Combined(ExitRule):
    def __init__(self, a: ExitRule, b: ExitRule, op: str):
        self.a = a
        self.b = b
        self.op = op

    def __call__(self, readout: Readout) -> torch.Tensor:
        a = self.a(readout)
        b = self.b(readout)
        return a | b if self.op == '|' else a & b

    def __repr__(self) -> str:
        return f'({self.a!r} {self.op} {self.b!r})'


def _check_rule(rule) -> ExitRule:
    if not isinstance(rule, ExitRule):
        raise TypeError(
            f'rule must be an ExitRule (Settled(k), Confident(p), combined with | and &), got {rule!r}'
        )
    return rule


# ---- early exit ------------------------------------------------------------------------------------
class EarlyExit(NamedTuple):
    """Result of :func:`early_exit`, per image: ``predictions`` (B,) long, ``logits`` (B, C) at the step it
    stopped, ``nfe`` (B,) long: field (block) evaluations its state went through, ``steps`` (B,) long:
    grid intervals integrated (1..max_steps)."""
    predictions: torch.Tensor
    logits: torch.Tensor
    nfe: torch.Tensor
    steps: torch.Tensor


def early_exit(
    model: nn.Module, x: torch.Tensor, rule: ExitRule = None, max_steps: Optional[int] = None
) -> EarlyExit:
    """Classify ``x`` (B, C, H, W), letting each image stop as soon as its prediction has settled.

    The state is integrated interval by interval on the model's current grid (``len(model.blocks)``
    intervals: change it first with ``model.set_solver`` / ``set_iterations``); after interval k the head
    reads it (``forward_head(norm(X(t_k)))``) and ``rule`` decides, per image, whether to stop (default
    ``Settled(patience=2)``). Stopped images leave the batch: later intervals integrate only the images
    still running. An image that never settles stops after ``max_steps`` intervals (default: all), with
    the logits read there; with a rule that never fires the result equals ``model(x)``.

    Runs without gradients, in eval mode (each module's mode is restored afterwards); deterministic. For
    Runge–Kutta grids and the recurrence the states are those of one integration of the whole grid;
    Adams / adaptive methods restart at every interval and count the evaluations of each call.

    Returns an :class:`EarlyExit` (``predictions``, ``logits``, ``nfe``, ``steps``), all per image.
    """
    stack = depth_stack(model)
    rule = _check_rule(Settled(patience=2) if rule is None else rule)
    if x.ndim != 4 or not len(x):
        raise ValueError(f'x must be a non-empty batch of images (B, C, H, W), got shape {tuple(x.shape)}')
    if model.num_classes == 0:
        raise ValueError(
            'the model has no classifier head to read (num_classes=0): reset_classifier(n) first'
        )
    if max_steps is not None and (not is_int(max_steps) or not 1 <= max_steps <= len(stack)):
        raise ValueError(
            f"max_steps must be an integer in 1..{len(stack)} (the model's grid intervals), got {max_steps!r}"
        )
    # a NumPy integer would turn the masks below into floats
    max_steps = int(max_steps or len(stack))
    with torch.no_grad(), eval_mode(model):
        z = embed_tokens(model, x)                                      # (B, N, D)
        # original index of each running image
        active = torch.arange(len(x), device=x.device)
        nfe, steps, unchanged = (torch.zeros_like(active) for _ in range(3))
        previous = unchanged - 1  # no prediction before the first step
        for i in range(max_steps):
            before = stack.nfe if i > 0 else 0
            z = stack[i](z)
            # evaluations of this call, per image
            nfe[active] += stack.nfe - before
            # the head reads the state as the forward reads its end point; a bViT's stage heads their stages
            if getattr(model, 'stage_heads', None):
                logits = model._head_for(i + 1)(model.forward_head(model.norm(z), pre_logits=True))
            else:
                logits = model.forward_head(model.norm(z))                 # (b, C)
            if logits.ndim != 2:
                raise ValueError(
                    f'the head returned shape {tuple(logits.shape)}; early exit needs class logits (B, C)'
                )
            if i == 0:
                logits_out = torch.empty_like(logits)
            prediction = logits.argmax(dim=-1)
            unchanged = torch.where(prediction == previous, unchanged + 1, 0)
            done = rule(
                Readout(i + 1, logits, logits.float().softmax(dim=-1), prediction, unchanged)
            )
            if (
                not isinstance(done, torch.Tensor)
                or done.dtype != torch.bool
                or done.shape != prediction.shape
            ):
                raise TypeError(
                    f'{rule!r} must return a bool tensor of shape {tuple(prediction.shape)}, got '
                    f'{getattr(done, "dtype", type(done).__name__)} {tuple(getattr(done, "shape", ()))}'
                )
            done = done | (i == max_steps - 1)
            finished = active[done]
            logits_out[finished] = logits[done]
            steps[finished] = i + 1
            if bool(done.all()):
                break
            z = z[~done]
            active = active[~done]
            previous = prediction[~done]
            unchanged = unchanged[~done]
    # each image's prediction is the argmax of the logits it stopped with
    return EarlyExit(logits_out.argmax(dim=-1), logits_out, nfe, steps)
