"""bViT in the ODE regime: state-subtracted vs naive field, and solver order at matched block evaluations.

Trains bvit_tiny_cifar (regime 'ode', horizon [0, T = 12]) four times with the same data order,
initialisation and recipe (bench/_train.py), every run costing 12 block evaluations per forward:

    state_subtracted  euler    12 steps  (h = 1: identical to plain recurrence)
    naive             euler    12 steps  (ż = B(z): z ← z + B(z))
    state_subtracted  midpoint  6 steps  (h = 2)
    state_subtracted  rk4       3 steps  (h = 4)

then measures test top-1 with the grid it was trained on and with finer grids (euler 24 and
rk4 12 steps over the same horizon: closer to the exact flow of the learned field).

    python bench/bvit_field_and_solver.py [--train-per-class 600] [--epochs 2] [--seed N] [--device cuda]

Rows accumulate across seeds at the same budget (a run replaces its own seed's rows).
"""
import argparse

import timm
import torch

import timm_odevit  # noqa: F401
from _data import load_split
from _train import accuracy, add_recipe_args, classification_task, fit, subset_budget
from _util import RESULTS, read_result, write_result

RUNS = (
    ('state_subtracted', 'euler', 12),
    ('naive', 'euler', 12),
    ('state_subtracted', 'midpoint', 6),
    ('state_subtracted', 'rk4', 3),
)
FINE_GRIDS = (('euler', 24), ('rk4', 12))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_recipe_args(p, train_per_class=600, device=True)
    args = p.parse_args()
    train, test = load_split(args.data, 'train', args.train_per_class), load_split(args.data, 'test', args.test_per_class)
    out, budget = RESULTS / 'bvit_field_and_solver.json', subset_budget(args)
    previous = read_result(out) if out.exists() else {}
    # the other seeds' rows at the same budget are kept (rows from before seeds were recorded are seed 0's)
    rows = [r for r in previous.get('rows', []) if r.get('seed', 0) != args.seed] if previous.get('budget') == budget else []
    for field, method, steps in RUNS:
        name = f'{field}/{method}{steps}'
        torch.manual_seed(args.seed)
        model = timm.create_model('bvit_tiny_cifar', regime='ode', field=field, solver=method, steps=steps)
        model.to(args.device)
        row = {'field': field, 'method': method, 'steps': steps, 'seed': args.seed}
        try:
            row['train_s'] = fit(classification_task(model), model.parameters(),
                                 train, args, args.seed, args.epochs, log=lambda m, name=name: print(f'{name}: {m}', flush=True))
            row['test_top1'] = accuracy(model, test)
            row['block_evals'] = model.nfe  # of the last forward
            trained = model.solver
            for fine_method, fine_steps in FINE_GRIDS:
                model.set_solver(method=fine_method, steps=fine_steps)
                try:
                    row[f'test_top1_{fine_method}{fine_steps}'] = accuracy(model, test)
                except FloatingPointError as e:  # the learned field need not be integrable on another grid
                    row[f'test_top1_{fine_method}{fine_steps}'] = f'non-finite: {e}'
            model.blocks.solver = trained
        except FloatingPointError as e:
            row['diverged'] = str(e)
        rows.append(row)
        print(name, row, flush=True)
    path = write_result('bvit_field_and_solver', {
        'benchmark': 'bvit_field_and_solver', 'model': 'bvit_tiny_cifar', 'regime': 'ode', 'horizon': 12,
        'budget': budget, 'rows': sorted(rows, key=lambda r: r.get('seed', 0))})
    print('| seed | field | solver | steps | block evals | test top-1 | euler 24 | rk4 12 |\n|---|---|---|---|---|---|---|---|')
    for r in rows:
        cells = [r.get('test_top1', 'diverged'), r.get('test_top1_euler24', '-'), r.get('test_top1_rk412', '-')]
        print(f'| {r.get("seed", 0)} | {r["field"]} | {r["method"]} | {r["steps"]} | {r.get("block_evals", "-")} | '
              + ' | '.join(f'{c:.2f}' if isinstance(c, float) else str(c) for c in cells) + ' |')
    print(f'wrote {path}')


if __name__ == '__main__':
    main()
