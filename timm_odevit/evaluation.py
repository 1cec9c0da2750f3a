"""Evaluation: top-1 / top-5 on an ImageFolder split with a model's own preprocessing, at other depths (grids
of the model's solver, within a budget of field evaluations) and beyond the training horizon."""
import contextlib
import math
import sys
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from ._checks import is_int, is_real
from .layers.depth_stack import ContinuousDepthStack, depth_stack
from .loader import batches, eval_loader

# Euler steps of an ODE model / iterations of a recurrent one
DEFAULT_GRIDS = (2, 3, 4, 6, 8, 12, 16, 24)


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


@torch.no_grad()
def evaluate(model: torch.nn.Module, data_dir: str, split: str = 'test', batch_size: int = 250,
             workers: int = 2, device: str = 'cpu', progress: bool = False) -> Dict[str, Any]:
    """Top-1/top-5 (%) on an ImageFolder split with the model's own preprocessing (timm's eval transform);
    the result also says what was evaluated: split, classes, image count, NFE."""
    return evaluate_together(
        {'model': model}, data_dir, split, batch_size, workers, device, progress
    )['model']


@torch.no_grad()
def evaluate_together(
    models: Dict[str, torch.nn.Module],
    data_dir: str,
    split: str = 'test',
    batch_size: int = 250,
    workers: int = 2,
    device: str = 'cpu',
    progress: bool = False,
) -> Dict[str, Dict[str, Any]]:
    """:func:`evaluate` of several models that share one preprocessing, in one pass over the images."""
    from tqdm import tqdm
    classes, loader = eval_loader(list(models.values()), data_dir, split, batch_size, workers)
    counts = {name: [0, 0, 0] for name in models}  # top-1, top-5, field evaluations x images
    total = 0
    # eval mode while measuring, then each module's own mode back
    with contextlib.ExitStack() as stack:
        for m in models.values():
            stack.enter_context(eval_mode(m.to(device)))
        for x, y in tqdm(
            batches(loader),
            desc=f'evaluating {split}',
            unit='batch',
            disable=not progress,
            file=sys.stderr,
            total=len(loader),
        ):
            x = x.to(device)
            y = y.to(device)
            for name, model in models.items():
                top5 = model(x).topk(min(5, model.num_classes), dim=-1).indices
                counts[name][0] += (top5[:, 0] == y).sum().item()
                counts[name][1] += (top5 == y[:, None]).any(-1).sum().item()
                # an adaptive solver's varies by batch
                counts[name][2] += getattr(model, 'nfe', 0) * y.numel()
            total += y.numel()
    return {name: {'top1': 100. * c1 / total, 'top5': 100. * c5 / total, 'images': total,
                   'nfe': round(nfe / total, 2), 'split': split, 'classes': classes,
                   'data_dir': str(data_dir)} for name, (c1, c5, nfe) in counts.items()}


def check_grids(grids) -> List[int]:
    """``grids`` as a list of ints; ValueError unless it is a non-empty sequence of positive integer depths
    (NumPy integers included)."""
    if isinstance(grids, (str, bytes)) or not hasattr(grids, '__len__') or not len(grids) \
            or not all(is_int(g) and g >= 1 for g in grids):
        raise ValueError(
            f'grids must be positive integers (Euler steps / iterations), got {grids!r}'
        )
    return [int(g) for g in grids]


def evaluate_grids(
    model: torch.nn.Module,
    data_dir: str,
    split: str = 'test',
    grids: Sequence[int] = DEFAULT_GRIDS,
    batch_size: int = 250,
    workers: int = 2,
    device: str = 'cpu',
) -> List[Dict[str, Any]]:
    """Top-1 (%) of a continuous-depth model at each depth of ``grids`` (steps of its solver's method, iterations of
    a recurrence) on an ImageFolder split: :func:`accuracy_at_budgets` over the model's own eval
    preprocessing. Returns ``[{'grid', 'depth', 'nfe', 'top1'}, ...]``; the model's own grid is restored."""
    grids = check_grids(grids)
    _, loader = eval_loader([model], data_dir, split, batch_size, workers)
    # restores the modes
    rows = accuracy_at_budgets(model.to(device), batches(loader), grids=grids)
    return [
        {'grid': r['grid'], 'depth': g, 'nfe': r['nfe'], 'top1': r['top1']}
        for g, r in zip(grids, rows)
    ]


@torch.no_grad()
def accuracy_vs_iterations(
    model: torch.nn.Module,
    loader: Iterable[Tuple[torch.Tensor, torch.Tensor]],
    iterations: int,
    device=None,
) -> List[Dict[str, float]]:
    """Top-1 accuracy (%) at every time point up to ``iterations`` ("beyond the training horizon").

    Runs the model once per batch to the horizon ``iterations`` (``model.set_iterations``; the
    trained horizon is restored afterwards) and classifies every intermediate state with the
    final head (stage heads at their own stages). For a recurrent bViT, point k is iteration k;
    in the ODE regime point k is time k·h.

    Returns: [{'point': k, 'time': t_k, 'top1': acc}, ...] for k = 1..points.
    """
    if not hasattr(model, 'set_iterations') or not hasattr(model, 'forward_stages'):
        raise TypeError(
            f'{type(model).__name__} has no iterations to vary (needs set_iterations and forward_stages)'
        )
    trained = model.iterations
    with eval_mode(model):  # the modes come back after the trained horizon (its interval modules)
        try:
            model.set_iterations(iterations)
            points = model.num_time_points
            correct = torch.zeros(points, dtype=torch.long)
            total = 0
            for x, y in loader:
                if device is not None:
                    x = x.to(device)
                    y = y.to(device)
                logits = model.forward_stages(x, stages=range(1, points + 1))
                correct += torch.stack([(lg.argmax(-1) == y).sum() for lg in logits]).cpu()
                total += y.numel()
        finally:
            model.set_iterations(trained)
    if total == 0:
        raise ValueError('the loader yielded no samples')
    step = iterations / points
    return [
        {'point': k + 1, 'time': (k + 1) * step, 'top1': 100.0 * correct[k].item() / total}
        for k in range(points)
    ]


GridSpec = Union[int, Tuple[str, int], Dict[str, object]]


def _grid_changes(stack: ContinuousDepthStack, grid: GridSpec) -> Tuple[str, Dict[str, object]]:
    """A grid spec -> (label, changes): an int = steps of the current method (iterations of a recurrence),
    ``(method, steps)``, or a dict of ``set_solver`` settings."""
    if is_int(grid):
        return f'{stack.solver.method} {grid}', {'steps': int(grid)}
    if isinstance(grid, tuple) and len(grid) == 2 and isinstance(grid[0], str):
        method, steps = grid
        return f'{method} {steps}', {'method': method, 'steps': steps}
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
    grids: Sequence[GridSpec] = DEFAULT_GRIDS,
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
    model_device = next(model.parameters()).device
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
