"""Do the registered models train without NaN on ordinary recipes? (issue 25)

Runs timm's real train.py (through ``python -m timm_odevit.train``) for one short epoch of N updates on a
symlinked CIFAR-10 subset, per recipe: train.py's defaults (SGD), the DeiT optimiser (AdamW,
lr 5e-4 x batch / 512, wd 0.05, no clipping; DeiT's 5 warm-up epochs would keep a short run at ~0 lr, so
it runs at peak lr from the first update, the harder case) and the repository's train_configs (their
model, optimiser, lr, clipping and model kwargs; also from the first update at peak lr unless
``--keep-warmup``); ``defaults_clip1`` adds ``--clip-grad 1`` to the defaults. Records per run: exit code,
updates logged, first / last / max loss, the error line if it stopped, the epoch-end top-1 on ``--val-per-class``
test images per class. Rows accumulate in bench/results/recipes_no_nan.json (key: name, batch, updates).

    ../.venv/bin/python recipes_no_nan.py --recipes defaults defaults_clip1 deit --models odevit_tiny_cifar --batch 128
    ../.venv/bin/python recipes_no_nan.py --recipes defaults --models vit_odeified --batch 32 --updates 1406 \
        --val-per-class 100    # one full 45k epoch
    ../.venv/bin/python recipes_no_nan.py --configs ../train_configs/release_odevit_tiny_cifar10_cpu.yaml
"""
import argparse
import csv
import json
import math
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

import yaml

from _data import DEFAULT_ROOT, make_subset
from _util import RESULTS, read_result, write_result

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODEL_ARGS = {'vit_odeified': ['--model-kwargs', 'base=vit_tiny_patch16_224', 'img_size=32', 'patch_size=4']}


def recipe_args(recipe: str, batch: int) -> list:
    if recipe == 'defaults':
        return ['--warmup-epochs', '0']
    if recipe == 'defaults_clip1':  # what the error of a blown-up ODE-ViT recommends
        return ['--warmup-epochs', '0', '--clip-grad', '1']
    if recipe == 'deit':
        return ['--opt', 'adamw', '--lr', f'{5e-4 * batch / 512:g}', '--weight-decay', '0.05', '--warmup-epochs', '0']
    raise SystemExit(f'unknown recipe {recipe!r}')


def run(name: str, args: list, data: pathlib.Path, updates: int, batch: int, out: pathlib.Path) -> dict:
    cmd = [sys.executable, '-m', 'timm_odevit.train', *args, '--data-dir', str(data), '--train-split', 'train',
           '--val-split', 'val', '-b', str(batch), '--epochs', '1', '--workers', '0', '--log-interval', '1',
           '--output', str(out), '--experiment', re.sub(r'\W', '_', name), '--num-classes', '10']
    t0 = time.time()
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    log = result.stdout + result.stderr
    losses = [float(v) for v in re.findall(r'Train: 0 \[\s*\d+/\d+ .*?Loss: (\S+) ', log)]
    lrs = [float(v) for v in re.findall(r'Train: 0 \[.*?LR: (\S+)', log)]
    errors = [line for line in log.splitlines() if re.match(r'\w*(Error|Exception)\b', line)]
    summary = out / re.sub(r'\W', '_', name) / 'summary.csv'
    evals = list(csv.DictReader(summary.open())) if summary.exists() else []
    finite = [v for v in losses if math.isfinite(v)]
    row = {'name': name, 'args': args, 'batch': batch, 'returncode': result.returncode, 'updates_logged': len(losses),
           'updates_planned': updates, 'loss_first': losses[0] if losses else None,
           'loss_last': losses[-1] if losses else None, 'loss_max': max(finite) if finite else None,
           'nan_or_inf': len(finite) != len(losses), 'lr_first': lrs[0] if lrs else None,
           'lr_max': max(lrs) if lrs else None, 'error': errors[-1][:400] if errors else None,
           'val_images': sum(1 for f in (data / 'val').rglob('*') if f.is_file()),
           'eval_top1': round(float(evals[-1]['eval_top1']), 2) if evals else None,
           'seconds': round(time.time() - t0)}
    print(json.dumps(row), flush=True)
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--data', default=str(DEFAULT_ROOT))
    p.add_argument('--models', nargs='+', default=['odevit_tiny_cifar'])
    p.add_argument('--recipes', nargs='*', default=[], choices=['defaults', 'defaults_clip1', 'deit'])
    p.add_argument('--configs', nargs='*', default=[], help='train_configs/*.yaml (their own model and batch)')
    p.add_argument('--keep-warmup', action='store_true', help="configs: keep their warm-up (default: peak lr at once)")
    p.add_argument('--batch', type=int, default=128, help='batch of the --recipes runs')
    p.add_argument('--updates', type=int, default=30)
    p.add_argument('--val-per-class', type=int, default=2, help='test images per class for the epoch-end top-1')
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)

        def subset(batch: int) -> pathlib.Path:
            data = tmp / f'data{batch}'
            if not data.exists():
                make_subset(pathlib.Path(args.data), data, {'train': ('train', -(-args.updates * batch // 10)),
                                                            'val': ('test', args.val_per_class)})
            return data

        for model in args.models:
            for recipe in args.recipes:
                rows.append(run(f'{model} {recipe}', ['--model', model, *MODEL_ARGS.get(model, []),
                                                       *recipe_args(recipe, args.batch)],
                                subset(args.batch), args.updates, args.batch, tmp / 'out'))
        for config in args.configs:
            cfg = yaml.safe_load(pathlib.Path(config).read_text())
            batch = int(cfg.get('batch_size', 128))
            extra = ['--config', str(pathlib.Path(config).resolve())]
            if not args.keep_warmup:
                extra += ['--warmup-epochs', '0']
            if cfg.get('kd_model_name'):  # the teacher's weights come from the Hub: not run offline
                print(f'{config}: skipped (distillation from {cfg["kd_model_name"]} needs its weights)', flush=True)
                continue
            rows.append(run(pathlib.Path(config).name + ('' if args.keep_warmup else ' (peak lr at once)'), extra,
                            subset(batch), args.updates, batch, tmp / 'out'))
    out = RESULTS / 'recipes_no_nan.json'
    previous = read_result(out).get('rows', []) if out.exists() else []
    merged = {(r['name'], r['batch'], r['updates_planned']): r for r in previous}
    merged.update({(r['name'], r['batch'], r['updates_planned']): r for r in rows})
    path = write_result('recipes_no_nan', {
        'benchmark': 'recipes_no_nan', 'data': 'CIFAR-10 subset: updates x batch train images (first per class), '
                                              'val_images test images (first per class) for eval_top1',
        'rows': list(merged.values())})
    print(f'wrote {path}')


if __name__ == '__main__':
    main()
