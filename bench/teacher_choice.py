"""The distillation teacher's architecture, chosen by held-out top-1 per CPU hour (issue 44).

Candidates run side by side (same config, same machine, at the same time; give each the same number of threads,
or their per-hour figures compare unequal resources: each row records the ``hardware`` of its compared epochs) with
timm's train.py through ``python -m tools.train``; this reads their run folders after the same number of epochs
and writes ``results/teacher_choice.json``:

    python bench/teacher_choice.py output/train/teacher_convstem:output/logs/teacher_convstem.log \
        output/train/teacher_plain:output/logs/teacher_plain.log --epochs 1

Held-out = the 5,000 images ``python -m tools.holdout_split`` holds out of the training split (never test).
Top-1 is the raw weights' (train.py's log: ``Test: [..] Acc@1 x (mean)``): after one epoch an EMA of decay
0.999 still mostly holds the initial weights, and summary.csv logs only the EMA's.
"""
import argparse
import csv
import json
import pathlib
import re

import yaml

from _util import write_result


def raw_top1(log: pathlib.Path, epochs: int) -> float:
    """The raw weights' held-out top-1 at the end of epoch ``epochs`` from train.py's stdout."""
    finals = [line for line in log.read_text().splitlines() if line.startswith('Test: [')
              and re.match(r'Test: \[\s*(\d+)/\1\]', line)]
    if len(finals) < epochs:
        raise SystemExit(f'{log} has {len(finals)} raw evaluations, fewer than --epochs {epochs}')
    return float(re.search(r'Acc@1:\s*[\d.]+\s*\(\s*([\d.]+)\)', finals[epochs - 1]).group(1))


def run_row(run_dir: pathlib.Path, log: pathlib.Path, epochs: int) -> dict:
    args = yaml.safe_load((run_dir / 'args.yaml').read_text())
    with open(run_dir / 'summary.csv', newline='') as f:
        rows = list(csv.DictReader(f))
    if len(rows) < epochs:
        raise SystemExit(f'{run_dir}/summary.csv has {len(rows)} epochs, fewer than --epochs {epochs}')
    seconds = json.loads((run_dir / 'train_time.json').read_text())
    wall = sum(seconds['epochs'][str(e)] for e in range(epochs))
    top1 = raw_top1(log, epochs)
    return {'model': args['model'], 'model_kwargs': args.get('model_kwargs') or {}, 'data_dir': args['data_dir'],
            'val_split': args['val_split'], 'epochs_done': epochs, 'epochs_scheduled': args['epochs'],
            'held_out_top1': top1, 'held_out_top1_ema': float(rows[epochs - 1]['eval_top1']), 'wall_s': round(wall, 1), 'held_out_top1_per_hour': round(top1 / (wall / 3600), 2),
            'hardware': _hardware(seconds, epochs), 'run': run_dir.name}


def _hardware(seconds: dict, epochs: int) -> str:
    """The machine of the compared epochs (train_time.json's ``epoch_hardware``); a record without it names only the
    last epoch's machine, which a resume with other threads changes: refused rather than misattributed."""
    per_epoch = dict.fromkeys(seconds.get('epoch_hardware', {}).get(str(e)) for e in range(epochs))  # in epoch order
    if None in per_epoch:
        raise SystemExit("train_time.json has no per-epoch machine (epoch_hardware): this comparison cannot say what "
                         "its epochs ran on")
    return ' / '.join(per_epoch)  # as tools.train.record_train_time names a run's machines


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('runs', nargs='+', help='RUN_DIR:LOG pairs (train.py run folder and its stdout)')
    p.add_argument('--epochs', type=int, default=1, help='compare after this many epochs of each run')
    a = p.parse_args()
    rows = [run_row(*map(pathlib.Path, r.split(':', 1)), a.epochs) for r in a.runs]
    best = max(rows, key=lambda r: r['held_out_top1_per_hour'])
    path = write_result('teacher_choice', {'rows': rows, 'chosen': best['run']})  # each row: its run's hardware
    for r in rows:
        print(f"{r['run']}: held-out {r['held_out_top1']:.2f} % after {a.epochs} epoch(s), {r['wall_s']:.0f} s, "
              f"{r['held_out_top1_per_hour']:.2f} points/hour")
    print(f'chosen: {best["run"]} -> {path}')


if __name__ == '__main__':
    main()
