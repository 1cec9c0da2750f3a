"""The one training recipe every accuracy benchmark uses, and top-1 evaluation.

AdamW, one-cycle (10 % warm-up, cosine), weight decay 0.05, flip + 4-px reflect-pad crop,
label smoothing 0.1 (set by the task), grad-norm clip 1 — the recipe of the benchmarks issue's
CIFAR-10 reference point.
"""
import math
import time
from typing import Callable, Optional, Sequence, Tuple

import torch
from timm.optim import create_optimizer_v2
from timm.task import ClassificationTask

from _data import DEFAULT_ROOT, augment


def add_recipe_args(p, train_per_class: int, test_per_class: Optional[int] = 200, device: bool = False) -> None:
    """The data and recipe flags every accuracy benchmark takes (``test_per_class=None``: no test subset flag;
    ``device``: a ``--device`` flag, for the scripts that move their models there)."""
    p.add_argument('--data', default=str(DEFAULT_ROOT))
    p.add_argument('--train-per-class', type=int, default=train_per_class)
    if test_per_class is not None:
        p.add_argument('--test-per-class', type=int, default=test_per_class)
    p.add_argument('--epochs', type=int, default=2)
    p.add_argument('--batch', type=int, default=128)
    p.add_argument('--lr', type=float, default=1e-3)
    p.add_argument('--seed', type=int, default=0)
    if device:
        add_device_arg(p)


def add_holdout_arg(p, per_class: int) -> None:
    """``--holdout-per-class``: held-out images per class, the training images after the first --train-per-class."""
    p.add_argument('--holdout-per-class', type=int, default=per_class,
                   help='held-out images per class: the training images after the first --train-per-class')


def add_device_arg(p) -> None:
    """``--device``: where the models train and are evaluated; data and augmentation stay on the CPU."""
    p.add_argument('--device', default='cpu', help='where the models train and are evaluated (cpu, cuda); the data '
                   'and its augmentation stay on the CPU, so a seed draws the same batches on every device')


def subset_budget(args) -> str:
    """The budget of a run on the first ``train_per_class`` / ``test_per_class`` images of each class."""
    return (f'{10 * args.train_per_class} CIFAR-10 train images (first per class), {args.epochs} epochs, batch '
            f'{args.batch}, AdamW lr {args.lr} one-cycle (10% warm-up), wd 0.05, flip + 4px crop, smoothing '
            f'0.1, clip 1; test on {10 * args.test_per_class} test images (first per class); CPU-sized')


def classification_task(model: torch.nn.Module) -> ClassificationTask:
    """timm's CE task with the recipe's label smoothing."""
    return ClassificationTask(model, criterion_kwargs={'smoothing': 0.1})


def fit(task, params: Sequence[torch.nn.Parameter], data: Tuple[torch.Tensor, torch.Tensor], args, seed: int,
        epochs: int, log: Optional[Callable[[str], None]] = None,
        on_step: Optional[Callable[[int, float], None]] = None) -> float:
    """Train ``task`` (a timm TrainingTask) on in-memory ``data``; ``args`` gives lr and batch. Returns seconds.

    ``on_step(step, loss)`` is called after every optimiser step (0-based); it must leave the model in train mode.
    """
    x, y = data
    params = list(params)
    device = params[0].device
    opt = create_optimizer_v2(params, 'adamw', lr=args.lr, weight_decay=0.05)
    steps_per_epoch = math.ceil(len(x) / args.batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=steps_per_epoch * epochs,
                                                pct_start=0.1)
    gen = torch.Generator().manual_seed(seed)
    t0 = time.time()
    step = 0
    for epoch in range(epochs):
        perm = torch.randperm(len(x), generator=gen)
        task.train()
        for s in range(0, len(x), args.batch):
            idx = perm[s:s + args.batch]
            loss = task(augment(x[idx], gen).to(device), y[idx].to(device))['loss']
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            if on_step is not None:
                on_step(step, loss.item())
            step += 1
        if log is not None:
            log(f'epoch {epoch + 1}/{epochs} loss {loss.item():.3f} ({time.time() - t0:.0f}s)')
    return time.time() - t0


@torch.no_grad()
def accuracy(model: torch.nn.Module, data: Tuple[torch.Tensor, torch.Tensor], batch: int = 500) -> float:
    """Top-1 (%) of ``model`` in eval mode on in-memory ``data`` (batches moved to the model's device)."""
    model.eval()
    x, y = data
    device = next(model.parameters()).device
    correct = sum((model(x[i:i + batch].to(device)).argmax(-1).cpu() == y[i:i + batch]).sum().item()
                  for i in range(0, len(x), batch))
    return 100. * correct / len(x)


def add_grid_study_args(p, device: bool = False) -> None:
    """The flags of the step-grid studies (step_robustness.py, anytime_training.py): inference grids, seeds, threads,
    and the head_init_accuracy budget (3,000 train / 1,000 test images, 3 epochs, batch 64)."""
    p.add_argument('--grids', nargs='+', type=int, default=[2, 3, 4, 6, 8, 12, 16, 24])
    p.add_argument('--seeds', nargs='+', type=int, default=[0, 1, 2])
    p.add_argument('--threads', type=int, default=1)
    add_recipe_args(p, train_per_class=300, test_per_class=100, device=device)
    p.set_defaults(epochs=3, batch=64)


def top1_at_grids(model: torch.nn.Module, data: Tuple[torch.Tensor, torch.Tensor], grids: Sequence[int]) -> dict:
    """Test top-1 (%) of ``model`` at every Euler grid (every iteration count of a recurrent model), keyed by the
    depth as a string."""
    from timm_odevit.anytime import accuracy_at_budgets
    from timm_odevit.layers.depth_stack import depth_stack
    loader = list(zip(data[0].split(250), data[1].split(250)))
    recurrent = depth_stack(model).solver.unit == 'iteration'
    table = accuracy_at_budgets(model, loader, grids=[g if recurrent else ('euler', g) for g in grids])
    return {str(g): round(r['top1'], 2) for g, r in zip(grids, table)}
