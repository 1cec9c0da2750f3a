"""CPU training speed with timm's own train.py: images/s of a train step per setting.

Each setting is one `python -m timm_odevit.train` run (timm's train.py with our models registered)
on the same small ImageFolder subset (``--train-per-class`` images per class: one epoch of
10·n/batch updates, last partial batch dropped), seed and recipe, batch ``--batch``; the speed is
the median of train.py's logged per-update rates after ``--skip`` warm-up updates (compilation
included there); a run still going after ``--timeout`` s is stopped and measured on the updates
logged until then. The mean training loss of the last updates is reported
beside it: same seed and data order, so a setting that changes the numerics (bf16, compile) shows
up as a loss that departs from fp32's. Settings run one after the other (never two at once), and
the table gives ratios to fp32 within one invocation.

    ../.venv/bin/python train_speed.py                               # both tiny models, every setting
    ../.venv/bin/python train_speed.py --models odevit_tiny_cifar --settings fp32 bf16

Writes results/train_speed.json (rows accumulate per model × setting).
"""
import argparse
import json
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time

from _data import make_subset
from _util import RESULTS, environment, read_result

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT.parent / 'shared' / 'data' / 'cifar10'

# extra train.py arguments per setting; the base run is fp32, 1 loader worker (the release configs)
SETTINGS = {
    'fp32': [],
    'channels_last': ['--channels-last'],
    'workers0': ['--workers', '0'],
    'workers2': ['--workers', '2'],
    'compile': ['--torchcompile'],
    'bf16': ['--amp', '--amp-dtype', 'bfloat16'],
    'compile_bf16': ['--torchcompile', '--amp', '--amp-dtype', 'bfloat16'],
}
MODELS = {
    'odevit_tiny_cifar': 'steps=6',  # the release recipe (6 Euler steps)
    'bvit_tiny_cifar': None,
}
TRAIN_LINE = re.compile(r'Train: \d+ \[\s*(\d+)/\d+.*?Loss: ([\d.naninf]+) .*?Time: ([\d.]+)s,\s+([\d.]+)/s'
                        r'.*?Data: ([\d.]+)')


def run(model: str, setting: str, data: pathlib.Path, args, out_dir: pathlib.Path) -> dict:
    cmd = [sys.executable, '-m', 'timm_odevit.train', '--data-dir', str(data), '--train-split', 'train',
           '--val-split', 'val', '--model', model, '--num-classes', '10', '--batch-size', str(args.batch),
           '--validation-batch-size', '250', '--opt', 'adamw', '--lr', '1e-3', '--weight-decay', '0.05',
           '--sched', 'cosine', '--epochs', '1', '--warmup-epochs', '0', '--smoothing', '0.1', '--clip-grad', '1.0',
           '--hflip', '0.5', '--scale', '0.8', '1.0', '--ratio', '1.0', '1.0', '--crop-pct', '1.0', '--workers', '1',
           '--log-interval', '1', '--seed', '42',
           '--checkpoint-hist', '1', '--output', str(out_dir), '--experiment', f'{model}-{setting}']
    if MODELS[model]:
        cmd += ['--model-kwargs', MODELS[model]]
    cmd += SETTINGS[setting]
    log_path = out_dir / f'{model}-{setting}.log'
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with open(log_path, 'w') as log_file:
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
        try:
            returncode = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:  # too slow to finish: measured on the updates logged so far
            proc.kill()
            returncode = proc.wait()
    wall = time.time() - t0
    log = log_path.read_text()
    row = {'model': model, 'setting': setting, 'extra_args': ' '.join(SETTINGS[setting]), 'wall_s': round(wall, 1)}
    updates = sorted({int(m[1]): (int(m[1]), float(m[2]), float(m[4]), float(m[5]))
                      for m in TRAIN_LINE.finditer(log)}.values())  # one entry per update
    timed = [u for u in updates if u[0] >= args.skip]
    if wall >= args.timeout:
        row['stopped_after_s'] = args.timeout
    elif returncode:
        return dict(row, error=log[-1500:])
    if len(timed) < 3 and len(updates) >= 2:  # too slow to pass the warm-up: every update after the first
        timed = updates[1:]
        row['timed_after_update'] = 1
    if len(timed) < 1:  # not one update after the first: a bound only
        return dict(row, images_per_s_below=round(args.batch * (len(updates) + 1) / wall, 2),
                    updates=len(updates))
    top1 = re.findall(r'Acc@1:\s+([\d.]+)\s+\(\s*([\d.]+)\)', log)
    last = [u[1] for u in updates[-10:]]
    return dict(
        row, images_per_s=round(statistics.median(u[2] for u in timed), 2),
        data_s_per_update=round(statistics.median(u[3] for u in timed), 4),
        mean_loss_last10=round(sum(last) / len(last), 4) if 'stopped_after_s' not in row else None,
        val_top1=float(top1[-1][1]) if top1 and 'stopped_after_s' not in row else None,
        updates=len(updates), updates_timed=len(timed))


def write(out: pathlib.Path, rows: list, budget: str) -> None:
    out.write_text(json.dumps({'environment': environment(), 'budget': budget, 'rows': rows}, indent=1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--data', default=str(DATA))
    p.add_argument('--models', nargs='+', default=list(MODELS), choices=list(MODELS))
    p.add_argument('--settings', nargs='+', default=list(SETTINGS), choices=list(SETTINGS))
    p.add_argument('--skip', type=int, default=8, help='warm-up updates left out of the median (compile included)')
    p.add_argument('--batch', type=int, default=128)
    p.add_argument('--train-per-class', type=int, default=400)
    p.add_argument('--val-per-class', type=int, default=50)
    p.add_argument('--timeout', type=int, default=300, help='stop a run after this many seconds')
    args = p.parse_args()
    if 10 * args.train_per_class // args.batch <= args.skip + 2:
        p.error('one epoch must have at least --skip + 3 updates (raise --train-per-class)')
    out = RESULTS / 'train_speed.json'
    rows = read_result(out)['rows'] if out.exists() else []
    budget = (f'timm train.py, one epoch of {10 * args.train_per_class} train images (first per class, PNG '
              f'ImageFolder) = {10 * args.train_per_class // args.batch} AdamW updates of batch {args.batch}; '
              f'median of the per-update rates after the first {args.skip}; validation on '
              f'{10 * args.val_per_class} test images; runs stopped after {args.timeout} s are measured on '
              'the updates logged until then')
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        make_subset(pathlib.Path(args.data), tmp / 'data',
                    {'train': ('train', args.train_per_class), 'val': ('test', args.val_per_class)})
        for model in args.models:
            for setting in args.settings:
                row = run(model, setting, tmp / 'data', args, tmp / 'out')
                rows = [r for r in rows if (r['model'], r['setting']) != (model, setting)] + [row]
                write(out, rows, budget)  # after every run: an interrupted study keeps what it measured
                print(json.dumps(row)[:400], flush=True)
    print('\n| model | setting | images/s | × fp32 | data s/update | loss (last 10) | wall s |')
    print('|---|---|---|---|---|---|---|')
    for r in rows:
        base = next((b for b in rows if b['model'] == r['model'] and b['setting'] == 'fp32' and 'error' not in b), None)
        if 'error' in r:
            print(f"| {r['model']} | {r['setting']} | failed | | | | {r['wall_s']} |")
            continue
        if 'images_per_s' not in r:
            print(f"| {r['model']} | {r['setting']} | < {r['images_per_s_below']} (stopped) | | | | {r['wall_s']} |")
            continue
        ratio = f"{r['images_per_s'] / base['images_per_s']:.2f}" if base else ''
        print(f"| {r['model']} | {r['setting']} | {r['images_per_s']} | {ratio} | {r['data_s_per_update']} | "
              f"{r['mean_loss_last10']} | {r['wall_s']} |")


if __name__ == '__main__':
    main()
