"""Training that makes the grid a dial, at equal training cost (issue 29, item 1).

``odevit_tiny_cifar`` trained with the shared recipe (bench/_train.py) under one of these schedules of the Euler grid
(the number of field evaluations per image in training, NFE, is the same on average for all of them):

* ``fixed``        — ``--steps`` S every update (today's training);
* ``random``       — a step count drawn per update, uniformly from S - w .. S + w (``--width`` w; mean S);
* ``incremental``  — coarse to fine (Queiruga et al. 2020): the first half of the updates at S - w steps, the
  second half at S + w (mean S);

then measured at every Euler grid of ``--grids`` on the test images (``timm_odevit.anytime.accuracy_at_budgets``),
with the training wall time beside it. The draws use their own generator (seeded per run), so data order and
augmentation are those of the fixed arm. Rows accumulate across invocations at the same budget (key: arm, seed).

    ../.venv/bin/python anytime_training.py --arms fixed random incremental --seeds 0 1 2
"""
import argparse
import json
import statistics

import timm
import torch

import timm_odevit  # noqa: F401
from _data import load_split
from _train import add_grid_study_args, classification_task, fit, subset_budget, top1_at_grids
from _util import RESULTS, write_result

ARMS = ('fixed', 'random', 'incremental')


def grid_schedule(arm: str, steps: int, width: int, total_updates: int, seed: int):
    """``schedule(update) -> Euler steps`` of that update (0-based)."""
    if arm == 'fixed':
        return lambda update: steps
    if arm == 'random':
        draws = torch.randint(steps - width, steps + width + 1, (total_updates,),
                              generator=torch.Generator().manual_seed(10_000 + seed)).tolist()
        return lambda update: draws[update]
    if arm == 'incremental':
        return lambda update: steps - width if update < total_updates // 2 else steps + width
    raise ValueError(f'unknown arm {arm!r}; choose from {ARMS}')


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--arms', nargs='+', default=list(ARMS), choices=ARMS)
    p.add_argument('--steps', type=int, default=6, help='the (mean) training grid S')
    p.add_argument('--width', type=int, default=3, help='random: S - w .. S + w; incremental: S - w, then S + w')
    add_grid_study_args(p)
    args = p.parse_args()
    if not 0 <= args.width < args.steps:
        p.error('--width must be in [0, --steps)')
    torch.set_num_threads(args.threads)
    train = load_split(args.data, 'train', args.train_per_class)
    test = load_split(args.data, 'test', args.test_per_class)
    updates = -(-len(train[1]) // args.batch) * args.epochs
    budget = subset_budget(args) + f'; Euler, mean {args.steps} steps, width {args.width}; {args.threads} thread(s)'
    out = RESULTS / 'anytime_training.json'

    def earlier_rows() -> dict:
        previous = json.loads(out.read_text()) if out.exists() else {}
        return {(r['arm'], r['seed']): r for r in previous.get('rows', [])} if previous.get('budget') == budget else {}

    for arm in args.arms:
        for seed in args.seeds:
            schedule = grid_schedule(arm, args.steps, args.width, updates, seed)
            torch.manual_seed(seed)
            model = timm.create_model('odevit_tiny_cifar', steps=schedule(0))
            used = []

            def next_grid(update: int, loss: float) -> None:
                used.append(model.blocks.nfe)
                if update + 1 < updates:
                    model.set_solver(steps=schedule(update + 1))

            seconds = fit(classification_task(model), model.parameters(), train, args, seed, args.epochs,
                          log=lambda m, a=arm, s=seed: print(f'{a} seed {s}: {m}', flush=True), on_step=next_grid)
            model.set_solver(steps=args.steps)
            row = {'arm': arm, 'seed': seed, 'train_s': round(seconds), 'updates': len(used),
                   'train_nfe_mean': round(statistics.fmean(used), 3),
                   'test_top1': top1_at_grids(model, test, args.grids)}
            print(row, flush=True)
            rows = sorted({**earlier_rows(), (arm, seed): row}.values(), key=lambda r: (ARMS.index(r['arm']), r['seed']))
            summary = {a: {g: round(statistics.fmean(r['test_top1'][g] for r in rs), 2) for g in rs[0]['test_top1']}
                       for a in ARMS for rs in [[r for r in rows if r['arm'] == a]] if rs}
            write_result('anytime_training', {'benchmark': 'anytime_training', 'budget': budget, 'grids': args.grids,
                                              'test_images': len(test[1]), 'mean_top1': summary, 'rows': rows})
    print(json.dumps(json.loads(out.read_text())['mean_top1'], indent=1))


if __name__ == '__main__':
    main()
