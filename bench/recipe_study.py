"""Recipe study for the CPU releases: short side-by-side train.py runs, one recipe change at a time.

Each candidate is a release config (``train_configs/release_<model>_cifar10_cpu.yaml``) plus the
extra train.py arguments below, trained with timm's train.py (``python -m timm_odevit.train``) on the
same data — the first ``--train-per-class`` training images per class of the held-out split
(``python -m tools.holdout_split ... --val-per-class 500``) — for the same ``--epochs`` with the same
seed, and validated after every epoch on the first ``--val-per-class`` images per class of its
validation split (never the test split). Reported per run: best and last validation top-1 (the EMA
weights' when EMA is on, as train.py selects), last training loss and wall time. Rows accumulate in
``results/recipe_study.json`` (keyed by model, candidate and budget): a killed study re-run skips
what it already measured.

    ../.venv/bin/python recipe_study.py --data ../data/cifar10_holdout --models odevit_tiny_cifar
    ../.venv/bin/python recipe_study.py --data ../data/cifar10_holdout --candidates base distill \\
        --teacher-checkpoint ../output/train/vit_teacher/model_best.pth.tar

A short run favours weak regularisation (mixup, RandAugment pay off when a model starts to overfit):
read a candidate that loses little here as one to keep for a long run, not as harmful.
"""
import argparse
import csv
import json
import pathlib
import subprocess
import sys
import tempfile
import time

from _data import make_subset
from _util import RESULTS, read_result, write_result

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = {
    'odevit_tiny_cifar': ROOT / 'train_configs' / 'release_odevit_tiny_cifar10_cpu.yaml',
    'bvit_tiny_cifar': ROOT / 'train_configs' / 'release_bvit_tiny_cifar10_cpu.yaml',
}
# extra train.py arguments over the release config, one change each (combinations named explicitly)
CANDIDATES = {
    'base': [],
    # the release configs inherit train.py's default colour jitter 0.4, which the bench recipe
    # (bench/_train.py: flip + reflect-pad crop, 50.42 % vs the release's 47.49 % at 2 epochs) has not
    'no_jitter': ['--color-jitter', '0'],
    'warmup_1ep': ['--warmup-epochs', '1'],
    # DeiT's rand-m9-mstd0.5-inc1, capped at magnitude 9: with magnitude noise timm (1.0.31) can draw level 10,
    # i.e. posterize to 0 bits, which the installed Pillow 13 rejects (ValueError, ~1 in 600 images)
    'randaug': ['--aa', 'rand-m9-mstd0.5-inc1-mmax9'],
    'mixup_cutmix': ['--mixup', '0.8', '--cutmix', '1.0'],
    # with the release configs' warm-up of the decay: at a fixed 0.999 the EMA of a 5-epoch study run (390 updates)
    # still holds 0.999^390 = 68 % of the initial weights (a first run, its row not kept: 26.68 against base's 40.64)
    'ema': ['--model-ema', '--model-ema-decay', '0.999', '--model-ema-warmup'],
    # bViT only: stage-wise deep supervision (bench d): on par at T, robust beyond it); shared head, same keys
    'deep_supervision': ['--model-kwargs', 'stages=[3,6,9,12]', 'stage_heads=shared'],
    'distill': ['--kd-model-name', '{teacher}', '--kd-teacher-checkpoint', '{teacher_checkpoint}',
                '--kd-distill-type', 'trajectory'],
}
ONLY_FOR = {'deep_supervision': {'bvit_tiny_cifar'}}  # candidates that are a knob of one model


def read_summary(path: pathlib.Path) -> list:
    with open(path) as f:
        return list(csv.DictReader(f))


def run(model: str, candidate: str, data: pathlib.Path, args, out_dir: pathlib.Path) -> dict:
    extra = [a.format(teacher=args.teacher, teacher_checkpoint=args.teacher_checkpoint) for a in CANDIDATES[candidate]]
    experiment = f'{model}-{candidate}'
    cmd = [sys.executable, '-m', 'timm_odevit.train', '--config', str(CONFIGS[model]), '--data-dir', str(data),
           '--epochs', str(args.epochs), '--seed', str(args.seed), '--checkpoint-hist', '1',
           '--output', str(out_dir), '--experiment', experiment, *extra]
    out_dir.mkdir(parents=True, exist_ok=True)
    log_path = out_dir / f'{experiment}.log'
    t0 = time.time()
    with open(log_path, 'w') as log:
        code = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    row = {'model': model, 'candidate': candidate, 'extra_args': ' '.join(extra), 'wall_s': round(time.time() - t0, 1)}
    summary = out_dir / experiment / 'summary.csv'
    if code or not summary.exists():
        return dict(row, error=log_path.read_text()[-1500:])
    epochs = read_summary(summary)
    top1 = [float(e['eval_top1']) for e in epochs]
    return dict(row, val_top1_per_epoch=top1, best_val_top1=max(top1), last_val_top1=top1[-1],
                last_train_loss=float(epochs[-1]['train_loss']))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--data', required=True, help='held-out split root (train/ and val/ class folders)')
    p.add_argument('--models', nargs='+', default=list(CONFIGS), choices=list(CONFIGS))
    p.add_argument('--candidates', nargs='+', default=[c for c in CANDIDATES if c != 'distill'],
                   choices=list(CANDIDATES))
    p.add_argument('--train-per-class', type=int, default=1000)
    p.add_argument('--val-per-class', type=int, default=250)
    p.add_argument('--epochs', type=int, default=5)
    p.add_argument('--seed', type=int, default=42)
    p.add_argument('--teacher', default='vit_tiny_cifar_params_matched', help='timm name of the distillation teacher')
    p.add_argument('--teacher-checkpoint', default=None, help="train.py checkpoint of the teacher ('distill')")
    p.add_argument('--keep-dir', default=None, help='keep the runs (logs, summary.csv, checkpoints) here')
    args = p.parse_args()
    if 'distill' in args.candidates and not args.teacher_checkpoint:
        p.error("candidate 'distill' needs --teacher-checkpoint (a train.py checkpoint of --teacher)")
    if args.teacher_checkpoint:
        args.teacher_checkpoint = str(pathlib.Path(args.teacher_checkpoint).resolve())
    budget = (f'{10 * args.train_per_class} train images (first {args.train_per_class}/class of {pathlib.Path(args.data).name}/train), '
              f'{args.epochs} epochs, seed {args.seed}; validation: first {args.val_per_class}/class of val/')
    out = RESULTS / 'recipe_study.json'
    rows = read_result(out)['rows'] if out.exists() else []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        data = tmp / 'data'
        make_subset(pathlib.Path(args.data).resolve(), data,
                    {'train': ('train', args.train_per_class), 'val': ('val', args.val_per_class)})
        runs_dir = pathlib.Path(args.keep_dir).resolve() if args.keep_dir else tmp / 'runs'
        for model in args.models:
            for candidate in args.candidates:
                if model not in ONLY_FOR.get(candidate, {model}):
                    continue
                key = (model, candidate, budget)
                if any((r['model'], r['candidate'], r['budget']) == key and 'error' not in r for r in rows):
                    print(f'{model} {candidate}: measured already, skipped', flush=True)
                    continue
                row = dict(run(model, candidate, data, args, runs_dir), budget=budget)
                rows = [r for r in rows if (r['model'], r['candidate'], r['budget']) != key] + [row]
                write_result('recipe_study', {'rows': rows})  # atomic; the rows measured now get the environment
                print(json.dumps(row)[:300], flush=True)
    print('\n| model | candidate | extra train.py args | best val top-1 | last val top-1 | Δ best vs base | wall s |')
    print('|---|---|---|---|---|---|---|')
    for r in rows:
        if 'error' in r:
            print(f"| {r['model']} | {r['candidate']} | {r['extra_args']} | failed | | | {r['wall_s']} |")
            continue
        base = next((b for b in rows if (b['model'], b['candidate'], b['budget']) == (r['model'], 'base', r['budget'])
                     and 'error' not in b), None)
        delta = f"{r['best_val_top1'] - base['best_val_top1']:+.2f}" if base else ''
        print(f"| {r['model']} | {r['candidate']} | `{r['extra_args']}` | {r['best_val_top1']:.2f} | "
              f"{r['last_val_top1']:.2f} | {delta} | {r['wall_s']} |")


if __name__ == '__main__':
    main()
