"""bViT beyond the training horizon: plain recurrence vs stage-wise deep supervision.

Trains bvit_tiny_cifar twice with the same data order and recipe — plain (loss at T only, timm's
ClassificationTask) and deep supervision (stages 3, 6, 9, 12, shared head, our
DeepSupervisionTask) — on a CIFAR-10 subset, then measures test accuracy at every iteration
1 … 4·T with timm_odevit.evaluation.accuracy_vs_iterations. CPU-sized by default. Each run is also scored on a
held-out split carved from the training images (the next --holdout-per-class images of each class, never trained on):
a choice between the two (the bViT release recipe's) is made there; the test images only report.

    python bench/deep_supervision_horizon.py [--train-per-class 800] [--test-per-class 200] [--seed N] [--device cuda]

Runs accumulate across seeds at the same budget (keys ``name@seedN``; a run replaces its own seed's).
"""
import argparse
import math
import time

import timm
import torch
from timm.optim import create_optimizer_v2
from timm.task import ClassificationTask

import timm_odevit  # noqa: F401
from timm_odevit.evaluation import accuracy_vs_iterations
from timm_odevit.tasks import DeepSupervisionTask
from _data import DEFAULT_ROOT, augment, load_split
from _train import add_device_arg, add_holdout_arg
from _util import RESULTS, read_result, seed_key, seed_of, write_result


def train(name, model, task_cls, data, args):
    x, y = data
    task = task_cls(model, criterion_kwargs=dict(smoothing=0.1))
    opt = create_optimizer_v2(model, 'adamw', lr=args.lr, weight_decay=0.05)
    steps_per_epoch = math.ceil(len(x) / args.batch)
    total = steps_per_epoch * args.epochs
    warmup = max(1, total // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warmup if s < warmup else 0.5 * (1 + math.cos(math.pi * (s - warmup) / (total - warmup))))
    gen = torch.Generator().manual_seed(args.seed)  # same order and augmentation for both runs
    model.train()
    t0 = time.time()
    for epoch in range(args.epochs):
        perm = torch.randperm(len(x), generator=gen)
        for s in range(steps_per_epoch):
            idx = perm[s * args.batch:(s + 1) * args.batch]
            loss = task(augment(x[idx], gen).to(args.device), y[idx].to(args.device))['loss']
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
        print(f'{name}: epoch {epoch + 1}/{args.epochs} loss {loss.item():.3f} ({time.time() - t0:.0f}s)', flush=True)
    return time.time() - t0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--data', default=str(DEFAULT_ROOT))
    p.add_argument('--train-per-class', type=int, default=800)
    p.add_argument('--test-per-class', type=int, default=200)
    p.add_argument('--epochs', type=int, default=3)
    p.add_argument('--batch', type=int, default=128)
    p.add_argument('--lr', type=float, default=1e-3)
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--horizon-mult', type=int, default=4)
    add_holdout_arg(p, 200)
    add_device_arg(p)
    args = p.parse_args()
    train_data = load_split(args.data, 'train', args.train_per_class)
    splits = {'test': load_split(args.data, 'test', args.test_per_class),
              'holdout': load_split(args.data, 'train', args.holdout_per_class, offset=args.train_per_class)}
    loaders = {k: [(x[i:i + 250], y[i:i + 250]) for i in range(0, len(x), 250)] for k, (x, y) in splits.items()}
    budget = (f'{10 * args.train_per_class} CIFAR-10 train images (first {args.train_per_class}/class), '
              f'{args.epochs} epochs, batch {args.batch}, AdamW lr {args.lr} wd 0.05, warmup 10% + cosine, '
              f'flip + 4px crop, smoothing 0.1, clip 1; held out: the next {10 * args.holdout_per_class} train images '
              f'({args.holdout_per_class}/class); test on {10 * args.test_per_class} test images (first per class)')
    out = RESULTS / 'deep_supervision_horizon.json'
    previous = read_result(out) if out.exists() else {}
    runs = ({k: r for k, r in previous['runs'].items() if seed_of(k) != args.seed}
            if previous.get('budget') == budget else {})  # the other seeds' runs at this budget are kept
    for name, kwargs, task_cls in (
            ('plain', {}, ClassificationTask),
            ('deep_supervision', {'stages': (3, 6, 9, 12)}, DeepSupervisionTask)):
        torch.manual_seed(args.seed)
        model = timm.create_model('bvit_tiny_cifar', **kwargs).to(args.device)
        seconds = train(name, model, task_cls, train_data, args)
        curves = {k: accuracy_vs_iterations(model, loader, iterations=args.horizon_mult * model.iterations,
                                            device=args.device) for k, loader in loaders.items()}
        runs[seed_key(name, args.seed)] = {
            'model_kwargs': {k: list(v) for k, v in kwargs.items()}, 'seed': args.seed, 'train_seconds': seconds,
            'accuracy_vs_iterations': curves['test'], 'holdout_accuracy_vs_iterations': curves['holdout']}
        print(name, ' '.join(f'{r["point"]}:{r["top1"]:.1f}' for r in curves['test']), flush=True)
    path = write_result('deep_supervision_horizon', {
        'benchmark': 'deep_supervision_horizon', 'model': 'bvit_tiny_cifar', 'trained_iterations': 12,
        'budget': budget, 'runs': dict(sorted(runs.items(), key=lambda kv: (seed_of(kv[0]), kv[0]))),
    })
    print(f'wrote {path}')


if __name__ == '__main__':
    main()
