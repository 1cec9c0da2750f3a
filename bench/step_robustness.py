"""How step-robust is ODE-ViT trained on a given Euler grid? (issue 29, item 0: our own deviation first)

The paper reports robustness to the number of steps with its training grid of 24 points; the releases here train
at 6 Euler steps and the architecture registers 12. This trains ``odevit_tiny_cifar`` at each ``--train-steps``
(same data, data order, epochs and seeds; the shared recipe of bench/_train.py) and measures test top-1 of every
trained model at every Euler grid of ``--grids`` (``timm_odevit.anytime.accuracy_at_budgets``). Rows accumulate
across invocations at the same budget (key: training steps, seed), so seeds can be added one run at a time.

    ../.venv/bin/python step_robustness.py --train-steps 6 12 24 --seeds 0 1 2
    ../.venv/bin/python step_robustness.py --train-steps 24 --seeds 3

Cost: training time grows linearly with the training grid (24 steps = 4x the field evaluations of 6).
"""
import argparse
import json
import statistics

import timm
import torch

import timm_odevit  # noqa: F401
from _data import load_split
from _train import add_grid_study_args, classification_task, fit, subset_budget, top1_at_grids
from _util import RESULTS, read_result, write_result


def summarize(rows: list, grids: list) -> dict:
    """Per training grid: mean top-1 over seeds at every inference grid, and its change from the training grid."""
    out = {}
    for steps in sorted({r['train_steps'] for r in rows}):
        runs = [r for r in rows if r['train_steps'] == steps]
        mean = {g: round(statistics.fmean(r['test_top1'][str(g)] for r in runs), 2) for g in grids
                if all(str(g) in r['test_top1'] for r in runs)}
        own = mean.get(steps)
        out[str(steps)] = {'seeds': sorted(r['seed'] for r in runs), 'mean_top1': {str(g): v for g, v in mean.items()},
                           'change_from_training_grid': None if own is None else
                           {str(g): round(v - own, 2) for g, v in mean.items()},
                           'train_s_mean': round(statistics.fmean(r['train_s'] for r in runs))}
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--train-steps', nargs='+', type=int, default=[6, 12, 24])
    add_grid_study_args(p, device=True)
    args = p.parse_args()
    if min(args.train_steps + args.grids) < 1:
        p.error('--train-steps and --grids must be positive step counts')
    torch.set_num_threads(args.threads)
    train = load_split(args.data, 'train', args.train_per_class)
    test = load_split(args.data, 'test', args.test_per_class)
    budget = subset_budget(args) + f'; Euler; {args.threads} CPU thread(s) per run'
    out = RESULTS / 'step_robustness.json'

    def earlier_rows() -> dict:
        previous = read_result(out) if out.exists() else {}
        return {(r['train_steps'], r['seed']): r for r in previous.get('rows', [])} \
            if previous.get('budget') == budget else {}

    path = None
    for steps in args.train_steps:
        for seed in args.seeds:
            torch.manual_seed(seed)
            model = timm.create_model('odevit_tiny_cifar', steps=steps).to(args.device)
            seconds = fit(classification_task(model), model.parameters(), train, args, seed, args.epochs,
                          log=lambda m, s=steps, sd=seed: print(f'steps {s} seed {sd}: {m}', flush=True))
            row = {'train_steps': steps, 'seed': seed, 'train_s': round(seconds),
                   'test_top1': top1_at_grids(model, test, args.grids)}
            print(row, flush=True)
            rows = {**earlier_rows(), (steps, seed): row}
            ordered = sorted(rows.values(), key=lambda r: (r['train_steps'], r['seed']))
            path = write_result('step_robustness', {
                'benchmark': 'step_robustness', 'budget': budget, 'grids': args.grids,
                'test_images': len(test[1]), 'summary': summarize(ordered, args.grids), 'rows': ordered})
    print(json.dumps(read_result(out)['summary'], indent=1))
    print(f'wrote {path}')


if __name__ == '__main__':
    main()
