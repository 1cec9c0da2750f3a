"""Evaluation: top-1 / top-5 on an ImageFolder split with a model's own preprocessing, at other depths (grids
of the model's solver, within a budget of field evaluations) and beyond the training horizon."""
import contextlib
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from ._checks import check_int, is_int
from .layers.depth_stack import depth_stack
from .layers.solver import SolverConfig
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
def measure(model: nn.Module, loader: Iterable, device=None, solvers: Sequence = (None,),
            points: Optional[Sequence[int]] = None) -> List[Dict[str, float]]:
    """Top-1 and top-5 (%), images, mean field evaluations per image and forward seconds of ``model`` on the batches
    of (images, class indices (B,)) that ``loader`` yields, once per solver of ``solvers`` (None: the model's own) on
    every batch: in eval mode without gradients, the model's solver and module modes restored afterwards, also on
    error. ``points``: instead of the model's output, the logits at these 1-based time points of its trajectory
    (``forward_stages``), a row each. ``device``: where the batches go (default: the model's device). Returns the
    rows of each solver in turn."""
    device = torch.device(device or next(model.parameters()).device)
    sync = torch.cuda.synchronize if device.type == 'cuda' else (lambda: None)
    stack = getattr(model, 'blocks', None)
    original = getattr(stack, 'solver', None)
    # per solver and read-out: top-1 and top-5 hits, field evaluations x images, seconds
    totals = torch.zeros(len(solvers), len(points) if points else 1, 4, dtype=torch.float64)
    images = 0
    with eval_mode(model):
        try:
            for x, y, *_ in loader:
                if y.ndim != 1 or y.is_floating_point() or len(y) != len(x):
                    raise ValueError(
                        f'targets must be class indices (B,), got {y.dtype} {tuple(y.shape)} for {len(x)} images: '
                        'pass hard labels'
                    )
                if not len(y):
                    continue
                x = x.to(device)
                y = y.to(device)
                for solver, total in zip(solvers, totals):
                    if solver is not None:
                        stack.solver = solver
                    sync()
                    start = time.perf_counter()
                    outputs = model.forward_stages(x, stages=points) if points else [model(x)]
                    sync()
                    seconds = time.perf_counter() - start
                    # an adaptive solver's NFE varies by batch; a discrete model has none
                    nfe = getattr(stack, 'nfe', 0)
                    for logits, read_out in zip(outputs, total):
                        hits = logits.topk(min(5, logits.shape[-1]), dim=-1).indices == y[:, None]
                        read_out += torch.tensor(
                            [hits[:, 0].sum().item(), hits.any(-1).sum().item(), nfe * len(y), seconds]
                        )
                images += len(y)
        finally:
            if original is not None:
                stack.solver = original  # the model args follow the solver back
    if not images:
        raise ValueError('the loader yielded no images')
    return [
        {'top1': 100. * top1 / images, 'top5': 100. * top5 / images, 'images': images, 'nfe': nfe / images,
         'seconds': seconds}
        for top1, top5, nfe, seconds in totals.flatten(0, 1).tolist()
    ]


def evaluate(model: torch.nn.Module, data_dir: str, split: str = 'test', batch_size: int = 250,
             workers: int = 2, device: str = 'cpu', progress: bool = False) -> Dict[str, Any]:
    """Top-1/top-5 (%) on an ImageFolder split with the model's own preprocessing (timm's eval transform);
    the result also says what was evaluated: split, classes, image count, NFE."""
    from tqdm import tqdm
    classes, loader = eval_loader(model, data_dir, split, batch_size, workers)
    shown = tqdm(
        batches(loader),
        desc=f'evaluating {split}',
        unit='batch',
        disable=not progress,
        total=len(loader),
    )
    row = measure(model.to(device), shown, device)[0]
    del row['seconds']
    return dict(row, nfe=round(row['nfe'], 2), split=split, classes=classes, data_dir=str(data_dir))


def check_grids(grids) -> List[int]:
    """``grids`` as a list of ints; ValueError unless it is a non-empty sequence of positive integer depths
    (NumPy integers included)."""
    if not len(grids) or not all(is_int(g) and g >= 1 for g in grids):  # a string fails too
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
    _, loader = eval_loader(model, data_dir, split, batch_size, workers)
    rows = accuracy_at_budgets(model.to(device), batches(loader), grids)
    return [
        {'grid': r['grid'], 'depth': g, 'nfe': r['nfe'], 'top1': r['top1']}
        for g, r in zip(grids, rows)
    ]


def accuracy_vs_iterations(
    model: torch.nn.Module,
    loader: Iterable[Tuple[torch.Tensor, torch.Tensor]],
    iterations: int,
    device=None,
) -> List[Dict[str, float]]:
    """Top-1 accuracy (%) at every time point up to ``iterations`` ("beyond the training horizon").

    Runs the model once per batch to the horizon ``iterations`` (as ``model.set_iterations`` sets it: the same step
    length; the trained horizon is restored afterwards) and classifies every intermediate state with the
    final head (stage heads at their own stages). For a recurrent bViT, point k is iteration k;
    in the ODE regime point k is time k·h. ``device``: where the batches go (default: the model's device).

    Returns: [{'point': k, 'time': t_k, 'top1': acc}, ...] for k = 1..points.
    """
    solver = model.blocks.solver.replace(t_end=float(check_int('iterations', iterations)))
    rows = measure(model, loader, device, [solver], points=range(1, solver.steps + 1))
    return [{'point': k, 'time': k * solver.h, 'top1': row['top1']} for k, row in enumerate(rows, 1)]


def _grid_changes(solver: SolverConfig, grid) -> Tuple[str, Dict[str, object]]:
    """A grid spec -> (label, changes): an int = steps of the current method (iterations of a recurrence),
    ``(method, steps)``, or a dict of ``set_solver`` settings."""
    if is_int(grid):
        return f'{solver.method} {grid}', {'steps': int(grid)}
    if isinstance(grid, tuple):
        method, steps = grid
        return f'{method} {steps}', {'method': method, 'steps': steps}
    if isinstance(grid, dict) and grid:
        return ', '.join(f'{k}={v}' for k, v in grid.items()), dict(grid)
    raise ValueError(
        f'bad grid {grid!r}: give steps (int), (method, steps) such as ("euler", 6), or set_solver kwargs'
    )


def accuracy_at_budgets(
    model: nn.Module,
    loader: Iterable,
    grids: Sequence = DEFAULT_GRIDS,
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
    restored afterwards, also on error (:func:`measure`). ``device``: where the batches go (default: the model's
    device).

    Returns one row per grid: ``{'grid': label, 'changes': the set_solver / set_iterations settings,
    'top1': %, 'top5': %, 'nfe': mean field evaluations per image, 'images': n, 'seconds': forward time}``.
    """
    original = depth_stack(model).solver
    specs = [_grid_changes(original, g) for g in grids]
    if not specs:
        raise ValueError(f'grids must be a non-empty list of grids, got {grids!r}')
    # every grid validated (SolverConfig's errors) before anything is measured
    solvers = [original.replace(**changes) for _, changes in specs]
    for (label, _), solver in zip(specs, solvers):
        # a switch between the recurrence and an ODE method: another model of the same block, not a budget of this one
        if solver.unit != original.unit:
            raise ValueError(
                f"grid {label!r}: the model iterates its block as a recurrence, which no ODE method approximates, so "
                "another method is another model, not a budget of this one: give iterations (ints, or ('recurrence', "
                "n)); to measure the block as an ODE, set_solver(method=...) first"
                if original.unit == 'iteration' else
                f"grid {label!r}: the model integrates an ODE ({original.method}), and the recurrence is a model of "
                "its own, not a grid of this ODE: give steps of an ODE method"
            )
    rows = measure(model, loader, device, solvers)
    return [{'grid': label, 'changes': changes, **row} for (label, changes), row in zip(specs, rows)]


def best_grid_for_budget(table: Sequence[Dict[str, object]], max_nfe: float) -> Dict[str, object]:
    """The row of :func:`accuracy_at_budgets` with the highest measured top-1 among the grids using at most
    ``max_nfe`` field evaluations per image (ties: the cheaper grid). Apply it with
    ``model.set_solver(**row['changes'])`` (a recurrent bViT's steps are its iterations). ValueError when no
    measured grid fits the budget."""
    fits = [r for r in table if r['nfe'] <= max_nfe]
    if not fits:
        cheapest = min(table, key=lambda r: r['nfe'])
        raise ValueError(
            f'no measured grid fits max_nfe={max_nfe:g}: the cheapest, {cheapest["grid"]}, uses '
            f'{cheapest["nfe"]:g} field evaluations per image'
        )
    return max(fits, key=lambda r: (r['top1'], -r['nfe']))
