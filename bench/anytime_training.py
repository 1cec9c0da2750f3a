"""Training that makes depth a dial, at equal training cost (issue 29, items 1 and 3).

A continuous-depth model trained with the shared recipe (bench/_train.py) under one schedule of its depth — Euler
steps of ``odevit_tiny_cifar``, recurrent iterations of ``bvit_tiny_cifar`` (``--model``) — with the same mean
number of field evaluations per image in training (NFE) in every arm:

* ``fixed``            — ``--steps`` S every update (today's training);
* ``random``           — a depth drawn per update, uniformly from S - w .. S + w (``--width`` w; mean S);
* ``incremental``      — coarse to fine (Queiruga et al. 2020): the first half of the updates at S - w, the second
  half at S + w (mean S);
* ``deep_supervision`` — bViT only: S every update, loss at every stage of the model's ``stages`` (timm_odevit's
  DeepSupervisionTask; the regime the bViT paper finds robust beyond the training horizon);

then measured at every depth of ``--grids`` (``timm_odevit.anytime.accuracy_at_budgets``) on a held-out split carved
from the training images (the next ``--holdout-per-class`` of each class, never trained on: where a schedule is
chosen) and on the test images (which only report), with the training wall time beside it. The draws use their own
generator (seeded per run), so data order and augmentation are those of the fixed arm. Rows accumulate across invocations at the same budget (key: arm, seed),
one study per model in bench/results/anytime_training.json; a ``--width`` other than the default S // 2 is stored
as its own arm (``random_w4``: S - 4 .. S + 4).

    ../.venv/bin/python anytime_training.py --arms fixed random incremental --seeds 0 1 2
    ../.venv/bin/python anytime_training.py --arms random --width 4 --seeds 0 1 2
    ../.venv/bin/python anytime_training.py --model bvit_tiny_cifar --grids 2 3 4 6 8 12 16 24 48 --seeds 0 1 2
"""
import argparse
import json
import statistics

import timm
import torch

import timm_odevit  # noqa: F401
from timm_odevit.layers.depth_stack import depth_stack
from timm_odevit.tasks import DeepSupervisionTask
from _data import load_split
from _train import add_grid_study_args, add_holdout_arg, classification_task, fit, subset_budget, top1_at_grids
from _util import RESULTS, read_result, write_result

ARMS = ('fixed', 'random', 'incremental', 'deep_supervision')
MODELS = {'odevit_tiny_cifar': 6, 'bvit_tiny_cifar': 12}  # model -> its release's training depth (default S)


def grid_schedule(arm: str, steps: int, width: int, total_updates: int, seed: int):
    """``schedule(update) -> depth`` (Euler steps or iterations) of that update (0-based)."""
    if arm in ('fixed', 'deep_supervision'):
        return lambda update: steps
    if arm == 'random':
        draws = torch.randint(steps - width, steps + width + 1, (total_updates,),
                              generator=torch.Generator().manual_seed(10_000 + seed)).tolist()
        return lambda update: draws[update]
    if arm == 'incremental':
        return lambda update: steps - width if update < total_updates // 2 else steps + width
    raise ValueError(f'unknown arm {arm!r}; choose from {ARMS}')


def set_depth(model: torch.nn.Module, depth: int) -> None:
    """Euler steps of an ODE model, iterations of a recurrent one."""
    if depth_stack(model).solver.unit == 'iteration':
        model.set_iterations(depth)
    else:
        model.set_solver(steps=depth)


def build_model(name: str, depth: int, arm: str) -> torch.nn.Module:
    """The model at ``depth``; the deep-supervision arm gets the release's stages (quarters of T, one shared head)."""
    if not name.startswith('bvit'):
        return timm.create_model(name, steps=depth)
    stages = {'stages': [depth * k // 4 for k in (1, 2, 3, 4)], 'stage_heads': 'shared'} if arm == 'deep_supervision' else {}
    return timm.create_model(name, iterations=depth, **stages)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--model', default='odevit_tiny_cifar', choices=list(MODELS))
    p.add_argument('--arms', nargs='+', default=None, choices=ARMS,
                   help='default: fixed random incremental (+ deep_supervision for bViT)')
    p.add_argument('--steps', type=int, default=None, help="the (mean) training depth S (default: the release's)")
    p.add_argument('--width', type=int, default=None, help='random: S - w .. S + w; incremental: S - w, then S + w '
                                                           '(default: S // 2)')
    add_holdout_arg(p, 100)
    add_grid_study_args(p, device=True)
    args = p.parse_args()
    recurrent = args.model.startswith('bvit')
    args.steps = args.steps or MODELS[args.model]
    args.width = args.steps // 2 if args.width is None else args.width
    args.arms = args.arms or [a for a in ARMS if recurrent or a != 'deep_supervision']
    if not 0 <= args.width < args.steps:
        p.error('--width must be in [0, --steps)')
    if 'deep_supervision' in args.arms and not recurrent:
        p.error('the deep_supervision arm needs a staged model (--model bvit_tiny_cifar)')
    if min(args.grids) < 1:
        p.error('--grids must be positive depths')
    torch.set_num_threads(args.threads)
    train = load_split(args.data, 'train', args.train_per_class)
    test = load_split(args.data, 'test', args.test_per_class)
    holdout = load_split(args.data, 'train', args.holdout_per_class, offset=args.train_per_class)
    updates = -(-len(train[1]) // args.batch) * args.epochs
    budget = (subset_budget(args) + f'; {"iterations" if recurrent else "Euler steps"}, mean {args.steps}; '
              f'{args.threads} thread(s); held out: the next {10 * args.holdout_per_class} train images '
              f'({args.holdout_per_class}/class)')
    default_width = args.steps // 2
    out = RESULTS / 'anytime_training.json'

    def studies() -> dict:
        return read_result(out).get('studies', {}) if out.exists() else {}

    def earlier_rows() -> dict:
        previous = studies().get(args.model, {})
        return {(r['arm'], r['seed']): r for r in previous.get('rows', [])} if previous.get('budget') == budget else {}

    for arm in args.arms:
        widened = arm in ('random', 'incremental') and args.width != default_width
        label = f'{arm}_w{args.width}' if widened else arm
        for seed in args.seeds:
            schedule = grid_schedule(arm, args.steps, args.width, updates, seed)
            torch.manual_seed(seed)
            model = build_model(args.model, schedule(0), arm).to(args.device)
            task = (DeepSupervisionTask(model, criterion_kwargs={'smoothing': 0.1}) if arm == 'deep_supervision'
                    else classification_task(model))
            used = []

            def next_depth(update: int, loss: float) -> None:
                used.append(depth_stack(model).nfe)
                if update + 1 < updates:
                    set_depth(model, schedule(update + 1))

            seconds = fit(task, model.parameters(), train, args, seed, args.epochs,
                          log=lambda m, a=arm, s=seed: print(f'{args.model} {a} seed {s}: {m}', flush=True),
                          on_step=next_depth)
            set_depth(model, args.steps)
            if hasattr(model, 'stage_outputs'):
                model.stage_outputs = False
            row = {'arm': label, 'seed': seed, 'width': args.width if arm in ('random', 'incremental') else 0,
                   'train_s': round(seconds), 'updates': len(used),
                   'train_nfe_mean': round(statistics.fmean(used), 3),
                   'holdout_top1': top1_at_grids(model, holdout, args.grids),
                   'test_top1': top1_at_grids(model, test, args.grids)}
            print(row, flush=True)
            rows = sorted({**earlier_rows(), (label, seed): row}.values(),
                          key=lambda r: (ARMS.index(r['arm'].split('_w')[0]), r['width'], r['seed']))
            summary = {split: {a: {g: round(statistics.fmean(r[split][g] for r in rs), 2) for g in rs[0][split]}
                               for a in dict.fromkeys(r['arm'] for r in rows)
                               for rs in [[r for r in rows if r['arm'] == a]]}
                       for split in ('holdout_top1', 'test_top1')}
            study = {'budget': budget, 'trained_depth': args.steps, 'default_width': default_width,
                     'grids': args.grids, 'holdout_images': len(holdout[1]), 'test_images': len(test[1]),
                     'mean_holdout_top1': summary['holdout_top1'], 'mean_top1': summary['test_top1'], 'rows': rows}
            write_result('anytime_training', {'benchmark': 'anytime_training',
                                              'studies': {**studies(), args.model: study}})
    print(json.dumps(studies()[args.model]['mean_top1'], indent=1))


if __name__ == '__main__':
    main()
