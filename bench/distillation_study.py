"""Does trajectory distillation pay? One budget, >= 3 seeds per arm, chosen on held-out, judged on test (issue 44).

Every arm trains ``odevit_tiny_cifar`` from random weights with timm's train.py (``python -m tools.train``)
on the release recipe (``train_configs/release_odevit_tiny_cifar10_cycle.yaml``: 6 Euler steps, 3-9 drawn per update,
EMA) for the same ``--epochs`` at lr 1e-3, on the 45,000 training images of the held-out split; train.py selects
its best epoch on the 5,000 held-out images (``model_best``); that model is then scored once on all 10,000 test
images. The arms differ only in the teacher's part:

    scratch             no teacher
    traj_uniform        trajectory distillation, the paper's loss ([CLS] MSE at the mapped time points,
    traj_arclength      attention-mass L1, JaSMin k = 2, CE from epoch 1), one arm per time mapping
    traj_softmax
    traj_no_attention   traj_uniform without the attention-mass term
    logit_kd            timm's own logit KD (``--kd-distill-type logit``), what a timm user tries first

The teacher is a local-dir release (``--teacher release/<tag>``, a folder with config.json and
model.safetensors), loaded by timm's ``local-dir:`` as both KD paths do. Each run appends its row, with
where and how it was measured, to ``results/distillation_study.json``; a finished (arm, seed) is skipped.
``--jobs N`` trains and scores N runs at once (for a GPU, where a few at once raise the throughput); a row's
``concurrent_runs`` is the most trainings that ran at once during its own, so its times compare only with rows of the
same count. A failed run stops the study: the runs not yet started are dropped, those running are still recorded.

    python bench/distillation_study.py --teacher release/teacher_convstem_cifar10_cycle6 --seeds 0 1 2 [--jobs 6]
"""
import argparse
import concurrent.futures
import csv
import json
import os
import pathlib
import subprocess
import sys
import threading
import time

from _util import RESULTS, read_result, seed_key, write_result

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIG = ROOT / 'train_configs' / 'release_odevit_tiny_cifar10_cycle.yaml'
# the paper's weights: 0.5 x the SUM of the per-block [CLS] MSEs (ours is their mean: 0.5 x 6 blocks = 3.0) and
# 0.5 x 0.5 on the attention-mass L1 (as train_configs/odevit_small_patch16_224_distill_cifar10.yaml)
TRAJECTORY = ['--kd-distill-type', 'trajectory', '--kd-jasmin-weight', '1.0', '--kd-jasmin-k', '2',
              '--kd-ce-start-epoch', '1', '--distill-loss-weight', '3.0', '--task-loss-weight', '1.0']
ARMS = {
    'scratch': [],
    'traj_uniform': TRAJECTORY + ['--kd-mapping', 'uniform', '--kd-attn-mass-weight', '0.25'],
    'traj_arclength': TRAJECTORY + ['--kd-mapping', 'arclength', '--kd-attn-mass-weight', '0.25'],
    'traj_softmax': TRAJECTORY + ['--kd-mapping', 'softmax', '--kd-attn-mass-weight', '0.25'],
    'traj_no_attention': TRAJECTORY + ['--kd-mapping', 'uniform'],
    'logit_kd': ['--kd-distill-type', 'logit'],
}


def train_command(arm: str, seed: int, args, out: pathlib.Path) -> list:
    cmd = [sys.executable, '-m', 'tools.train', '--config', str(CONFIG), '--data-dir', args.data_dir,
           '--epochs', str(args.epochs), '--lr', str(args.lr), '--seed', str(seed), '--output', str(out),
           '--experiment', seed_key(arm, seed)]
    if args.batch_size:
        cmd += ['--batch-size', str(args.batch_size)]
    if ARMS[arm]:
        cmd += ['--kd-model-name', f'local-dir:{args.teacher}'] + ARMS[arm]
    return cmd


def held_out_best(run: pathlib.Path) -> dict:
    """The epoch train.py selected on (its best held-out top-1 in summary.csv, 0-based as train.py counts)."""
    with open(run / 'summary.csv', newline='') as f:
        rows = list(csv.DictReader(f))
    best = max(rows, key=lambda r: float(r['eval_top1']))
    return {'held_out_top1': float(best['eval_top1']), 'best_epoch': int(best['epoch']), 'epochs_run': len(rows)}


def test_top1(run: pathlib.Path, test_dir: str) -> dict:
    import torch
    from timm_odevit.evaluation import evaluate
    from timm_odevit.hub import model_from_checkpoint
    model = model_from_checkpoint(str(run / 'model_best.pth.tar'))[0]
    result = evaluate(model, test_dir, 'test', device='cuda' if torch.cuda.is_available() else 'cpu')
    return {'test_top1': result['top1'], 'test_images': result['images']}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--teacher', required=True, help='a local-dir release folder of the teacher')
    p.add_argument('--arms', nargs='+', default=list(ARMS), choices=list(ARMS))
    p.add_argument('--seeds', nargs='+', type=int, default=[0, 1, 2])
    p.add_argument('--epochs', type=int, default=2)
    p.add_argument('--lr', type=float, default=1e-3)
    p.add_argument('--batch-size', type=int, default=None, help="default: the recipe's 128")
    p.add_argument('--data-dir', default=str(ROOT / 'data' / 'cifar10_holdout'), help='train / val (held-out) split')
    p.add_argument('--test-dir', default=str(ROOT.parent / 'shared' / 'data' / 'cifar10'))
    p.add_argument('--out', default=str(ROOT / 'output' / 'distillation_study'))
    p.add_argument('--name', default='distillation_study', help='results/NAME.json (another name for a smoke run)')
    p.add_argument('--jobs', type=int, default=1, help='runs trained at once')
    args = p.parse_args()
    teacher_cfg = json.loads((pathlib.Path(args.teacher) / 'config.json').read_text())
    path = RESULTS / f'{args.name}.json'
    runs = read_result(path)['runs'] if path.is_file() else {}
    todo = [(arm, seed) for seed in args.seeds for arm in args.arms if seed_key(arm, seed) not in runs]  # seed-major:
    # an interrupted study still has every arm at the seeds done

    running, peak, lock = set(), {}, threading.Lock()

    def run_one(arm: str, seed: int) -> dict:
        """Train, then score, in one worker (with --jobs 1 nothing else runs beside a training): the run's row."""
        key, cmd = seed_key(arm, seed), train_command(arm, seed, args, pathlib.Path(args.out))
        print(f'{key}: {" ".join(cmd)}', flush=True)
        with lock:
            running.add(key)
            for k in running:
                peak[k] = max(peak.get(k, 0), len(running))
        t0 = time.time()
        pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get('PYTHONPATH')]))  # the checkout's first
        try:
            subprocess.run(cmd, check=True, env={**os.environ, 'PYTHONPATH': pythonpath})
        finally:
            with lock:
                running.discard(key)
        wall_s, run = round(time.time() - t0, 1), pathlib.Path(args.out) / key
        return {'arm': arm, 'seed': seed, 'epochs': args.epochs, 'lr': args.lr,
                'train_s': json.loads((run / 'train_time.json').read_text())['seconds'], 'wall_s': wall_s,
                'concurrent_runs': peak[key], **held_out_best(run), **test_top1(run, args.test_dir),
                'run_command': ' '.join(cmd[1:]), 'config': str(CONFIG.relative_to(ROOT))}

    pool, error = concurrent.futures.ThreadPoolExecutor(args.jobs), None
    futures = {pool.submit(run_one, arm, seed): seed_key(arm, seed) for arm, seed in todo}
    for future in concurrent.futures.as_completed(futures):  # rows are written here, in one thread
        if future.cancelled():
            continue
        if future.exception() is not None:
            if error is None:  # stop: drop the runs not yet started; those running are recorded when they end
                error = future.exception()
                for f in futures:
                    f.cancel()
            continue
        runs[futures[future]] = future.result()
        write_result(args.name, {
            'benchmark': 'distillation_study', 'teacher': args.teacher, 'teacher_model': teacher_cfg.get('architecture'),
            'budget': f'{args.epochs} epochs of 45,000 images (release cycle recipe, lr {args.lr}), selected on '
                      '5,000 held-out images, scored on 10,000 test images',
            'runs': runs})
        print(f'{futures[future]}: {runs[futures[future]]}', flush=True)
    pool.shutdown()
    if error is not None:
        raise error


if __name__ == '__main__':
    main()
