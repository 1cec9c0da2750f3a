"""Anytime inference: depth as a dial at run time, from one checkpoint.

Two ways to spend less compute than the model's grid:

* **Early exit** (:func:`early_exit`): integrate interval by interval on the model's own grid; after
  every interval the head reads the state, and each image stops as soon as its prediction has settled
  under a stated :class:`ExitRule` (:class:`Settled`: the argmax stayed the same for ``patience``
  consecutive steps; :class:`Confident`: the top softmax probability reached ``threshold``; rules
  combine with ``|`` and ``&``). Finished images leave the batch, so later field evaluations run on
  fewer images and wall time falls with the NFE. Returns the predictions and the NFE each image used.
* **A fixed budget** (:func:`accuracy_at_budgets`, :func:`best_grid_for_budget`): top-1 at several
  grids, *measured on the data you pass* (nothing is stored with the weights), and the best measured
  grid within a budget of field evaluations per image.

    import timm, timm_odevit
    from timm_odevit.anytime import early_exit, Settled, Confident
    model = timm.create_model('odevit_tiny_cifar.c10', pretrained=True).eval()
    pred, logits, nfe, steps = early_exit(model, images, rule=Settled(patience=2) | Confident(0.9))
"""
import contextlib
import math
import time
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from ._checks import check_int, is_int, is_real
from .layers.depth_stack import ContinuousDepthStack, depth_stack
from .models._common import embed_tokens

__all__ = [
    'ExitRule', 'Settled', 'Confident', 'Readout', 'EarlyExit', 'early_exit',
    'accuracy_at_budgets', 'best_grid_for_budget',
]


@contextlib.contextmanager
def eval_mode(model: torch.nn.Module):
    """Eval mode for the duration (dropout off: deterministic), then every module's own mode back, by name: the
    interval modules that a grid change replaced on the way get the mode of those they replaced."""
    modes = {name: m.training for name, m in model.named_modules()}
    model.eval()
    try:
        yield model
    finally:
        for name, m in model.named_modules():
            m.training = modes.get(name, modes[''])


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
        return (
            self.a(readout) | self.b(readout)
            if self.op == '|'
            else self.a(readout) & self.b(readout)
        )

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


def _logits(model: nn.Module, z: torch.Tensor, time_point: int) -> torch.Tensor:
    """The head's reading of the state at 1-based time point ``time_point``, as the model's forward reads
    its end point (``forward_head(norm(z))``); a bViT trained with separate stage heads reads its training
    stages with their own head, as its ``forward_stages`` does."""
    if getattr(model, 'stage_heads', None):
        return model._head_for(time_point)(model.forward_head(model.norm(z), pre_logits=True))
    return model.forward_head(model.norm(z))


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
    if not isinstance(x, torch.Tensor):
        raise TypeError(f'x must be an image tensor (B, C, H, W), got {type(x).__name__}')
    if x.ndim != 4:
        raise ValueError(f'x must be an image batch (B, C, H, W), got shape {tuple(x.shape)}')
    if x.shape[0] == 0:
        raise ValueError('x is an empty batch (0 images): there is nothing to classify')
    if getattr(model, 'num_classes', 1) == 0:
        raise ValueError(
            'the model has no classifier head to read (num_classes=0): reset_classifier(n) first'
        )
    L = len(stack)
    B = x.shape[0]
    if max_steps is not None and (not is_int(max_steps) or not 1 <= max_steps <= L):
        raise ValueError(
            f"max_steps must be an integer in 1..{L} (the model's grid intervals), got {max_steps!r}"
        )
    # a NumPy integer would turn the masks below into floats
    max_steps = L if max_steps is None else int(max_steps)
    with torch.no_grad(), eval_mode(model):
        z = embed_tokens(model, x)                                      # (B, N, D)
        # original index of each running image
        active = torch.arange(B, device=x.device)
        nfe, steps, predictions = (
            torch.zeros(B, dtype=torch.long, device=x.device) for _ in range(3)
        )
        logits_out = previous = unchanged = None
        for i in range(max_steps):
            before = stack.nfe if i > 0 else 0
            z = stack[i](z)
            # evaluations of this call, per image
            nfe[active] += stack.nfe - before
            logits = _logits(model, z, i + 1)                          # (b, C)
            if logits.ndim != 2:
                raise ValueError(
                    f'the head returned shape {tuple(logits.shape)}; early exit needs class logits (B, C)'
                )
            logits_out = (
                logits.new_empty((B, logits.shape[1])) if logits_out is None else logits_out
            )
            prediction = logits.argmax(dim=-1)
            unchanged = torch.zeros_like(prediction) if previous is None else \
                torch.where(prediction == previous, unchanged + 1, torch.zeros_like(unchanged))
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
            predictions[finished] = prediction[done]
            steps[finished] = i + 1
            if bool(done.all()):
                break
            z = z[~done]
            active = active[~done]
            previous = prediction[~done]
            unchanged = unchanged[~done]
    return EarlyExit(predictions, logits_out, nfe, steps)


# ---- fixed budgets -----------------------------------------------------------------------------------
GridSpec = Union[int, Tuple[str, int], Dict[str, object]]


def _grid_changes(stack: ContinuousDepthStack, grid: GridSpec) -> Tuple[str, Dict[str, object]]:
    """A grid spec -> (label, changes): an int = steps of the current method (iterations of a recurrence),
    ``(method, steps)``, or a dict of ``set_solver`` settings."""
    if is_int(grid):
        return f'{stack.solver.method} {grid}', {'steps': check_int('grid steps', grid)}
    if isinstance(grid, tuple) and len(grid) == 2 and isinstance(grid[0], str):
        method, steps = grid
        return f'{method} {steps}', {
            'method': method,
            'steps': check_int(f'grid {grid!r}: steps', steps),
        }
    if isinstance(grid, dict) and grid:
        return ', '.join(f'{k}={v}' for k, v in grid.items()), dict(grid)
    raise ValueError(
        f'bad grid {grid!r}: give steps (int), (method, steps) such as ("euler", 6), or set_solver kwargs'
    )


def _regime_error(label: str, solver) -> str:
    """Why grid ``label`` is not a budget of a model integrated by ``solver``: it switches between the recurrence and
    an ODE method, another model of the same block rather than the same model at another cost."""
    if solver.method == 'recurrence':
        return (
            f"grid {label!r}: the model iterates its block as a recurrence, which no ODE method approximates, so "
            "another method is another model, not a budget of this one: give iterations (ints, or ('recurrence', "
            "n)); to measure the block as an ODE, set_solver(method=...) first"
        )
    return (
        f"grid {label!r}: the model integrates an ODE ({solver.method}), and the recurrence is a model of its own, "
        "not a grid of this ODE: give steps of an ODE method"
    )


def accuracy_at_budgets(
    model: nn.Module,
    loader: Iterable,
    grids: Sequence[GridSpec] = (2, 3, 4, 6, 8, 12, 16, 24),
    device: Optional[Union[str, torch.device]] = None,
) -> List[Dict[str, object]]:
    """Top-1 of ``model`` at each grid, **measured on the data ``loader`` yields** (batches of images and
    integer class targets); nothing is read from or stored with the weights, so the numbers are as good
    as that data is representative (use held-out data, not the test set you report on).

    ``grids``: ints (steps of the model's current method; iterations of a recurrent bViT), ``(method,
    steps)`` pairs such as ``('euler', 6)``, or dicts of ``set_solver`` settings (e.g. ``{'method':
    'dopri5', 'rtol': 1e-3}``, whose NFE is counted); a grid that switches between the recurrence and an ODE
    method is refused (another model, not a budget). The loader is read once; every grid sees every batch.
    Runs without gradients in eval mode; the model's solver, recorded model args and module modes are
    restored afterwards, also on error. ``device``: where the batches go (default: the model's device).

    Returns one row per grid: ``{'grid': label, 'changes': the set_solver / set_iterations settings,
    'nfe': mean field evaluations per image, 'top1': %, 'images': n, 'seconds': forward time}``.
    """
    stack = depth_stack(model)
    # NumPy arrays too
    if isinstance(grids, (str, bytes)) or not hasattr(grids, '__len__') or not len(grids):
        raise ValueError(f'grids must be a non-empty list of grids, got {grids!r}')
    original = stack.solver
    specs = [_grid_changes(stack, g) for g in grids]
    for label, changes in specs:  # validate every grid before measuring anything
        try:
            changed = original.replace(**changes)
        except (TypeError, ValueError) as e:
            raise ValueError(f'bad grid {changes}: {e}') from None
        if (changed.method == 'recurrence') != (original.method == 'recurrence'):
            raise ValueError(_regime_error(label, original))
    params = next(model.parameters(), None)
    model_device = params.device if params is not None else torch.device('cpu')
    device = model_device if device is None else torch.device(device)
    if device.type != model_device.type or device.index not in (None, model_device.index):
        raise ValueError(
            f'device={device} but the model is on {model_device}: move it first (model.to(device))'
        )
    sync = torch.cuda.synchronize if device.type == 'cuda' else (lambda: None)
    totals = [{'correct': 0, 'images': 0, 'evals': 0, 'seconds': 0.} for _ in specs]
    # the modes come back after the model's own grid (its interval modules)
    with torch.no_grad(), eval_mode(model):
        try:
            for batch in loader:
                if not isinstance(batch, (tuple, list)) or len(batch) < 2:
                    raise ValueError('the loader must yield (images, targets) batches')
                images = batch[0].to(device)
                targets = batch[1].to(device)
                if targets.ndim != 1 or targets.is_floating_point() or len(targets) != len(images):
                    raise ValueError(
                        f'targets must be class indices (B,), got {targets.dtype} '
                        f'{tuple(targets.shape)} for {len(images)} images: pass hard labels'
                    )
                if len(images) == 0:
                    continue
                for (_, changes), total in zip(specs, totals):
                    stack.solver = original.replace(**changes)
                    sync()
                    t0 = time.perf_counter()
                    logits = model(images)
                    sync()
                    total['seconds'] += time.perf_counter() - t0
                    total['correct'] += int((logits.argmax(dim=-1) == targets).sum())
                    total['images'] += len(images)
                    total['evals'] += stack.nfe * len(images)
        finally:
            stack.solver = original  # the model args follow the solver back
    if not totals[0]['images']:
        raise ValueError('the loader yielded no images')
    return [
        {
            'grid': label,
            'changes': changes,
            'nfe': t['evals'] / t['images'],
            'top1': 100.0 * t['correct'] / t['images'],
            'images': t['images'],
            'seconds': t['seconds'],
        }
        for (label, changes), t in zip(specs, totals)
    ]


def best_grid_for_budget(table: Sequence[Dict[str, object]], max_nfe: float) -> Dict[str, object]:
    """The row of :func:`accuracy_at_budgets` with the highest measured top-1 among the grids using at most
    ``max_nfe`` field evaluations per image (ties: the cheaper grid). Apply it with
    ``model.set_solver(**row['changes'])`` (a recurrent bViT's steps are its iterations). ValueError when no
    measured grid fits the budget."""
    if not is_real(max_nfe) or math.isnan(max_nfe):
        raise ValueError(f'max_nfe must be a number of field evaluations, got {max_nfe!r}')
    rows = list(table)
    if not rows or not all(isinstance(r, dict) and {'nfe', 'top1'} <= set(r) for r in rows):
        raise ValueError('table must be the non-empty list of rows accuracy_at_budgets returned')
    fits = [r for r in rows if r['nfe'] <= max_nfe]
    if not fits:
        cheapest = min(rows, key=lambda r: r['nfe'])
        raise ValueError(
            f'no measured grid fits max_nfe={max_nfe:g}: the cheapest, {cheapest["grid"]}, uses '
            f'{cheapest["nfe"]:g} field evaluations per image'
        )
    return max(fits, key=lambda r: (r['top1'], -r['nfe']))
