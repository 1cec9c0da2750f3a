"""Plug & play as the paper does it: an ODE-ViT in a trained ViT's shell, distilled along its trajectory, against the
free ODE-ViT (issue 60). One budget, >= 3 seeds per arm, selected on held-out images, judged on the test images.

Every arm trains with timm's train.py (``python -m tools.train``: the wrapper plus train_time.json) for the same
``--epochs`` on one recipe (``train_configs/plug_and_play_cifar10.yaml``; the free model's config differs only in its
model keys) on the 45,000 training images of the held-out split; train.py keeps its best epoch on the 5,000 held-out
images (``model_best``), which is then scored once on all 10,000 test images. The arms:

    free             odevit_tiny_cifar from scratch (the paper's baseline), 6 Euler steps
    plug_and_play    the shell student (the teacher's patch embedding, [CLS], position embedding, final norm and
                     classifier, frozen; a random ODE-ViT field at its width, 6 Euler steps) with the paper's loss:
                     [CLS] MSE at the mapped time points, attention-mass L1, JaSMin k = 2, CE from the first epoch
    shell_ce         the same student, cross-entropy only
    shell_logit_kd   the same student, timm's logit KD from the same teacher
    free_traj_ce0    the free model with the paper's loss (the distillation study's traj_uniform arm, CE from the
                     first epoch)

The teacher is the local-dir release ``release/teacher_convstem_cifar10_cycle6`` (the shell's source too). Each run
appends its row, with where and how it was measured, to ``results/plug_and_play.json``; a finished (arm, seed) is
skipped, so the study grows one run at a time (``--again`` runs it anew, keeping the row it replaces under
``replaced_runs``).

    python bench/plug_and_play.py --arms free plug_and_play --seeds 0
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

from _util import RESULTS, read_result, seed_key, write_result
from distillation_study import held_out_best, test_top1

ROOT = pathlib.Path(__file__).resolve().parents[1]
TEACHER = 'release/teacher_convstem_cifar10_cycle6'
SHELL_CONFIG = 'train_configs/plug_and_play_cifar10.yaml'
FREE_CONFIG = 'train_configs/plug_and_play_free_cifar10.yaml'
# the paper's weights: 0.5 x the SUM of the per-block [CLS] MSEs (ours is their mean: 0.5 x 6 blocks = 3.0),
# 0.5 x 0.5 on the attention-mass L1, JaSMin (k = 2 when distilling) and CE at 1; CE from the first epoch (the paper's
# curriculum is 1 epoch of its 100, so none at this budget); 6 teacher blocks on 6 time points, one each
TRAJECTORY = [
    '--kd-distill-type', 'trajectory',
    '--kd-mapping', 'uniform',
    '--distill-loss-weight', '3.0',
    '--task-loss-weight', '1.0',
    '--kd-attn-mass-weight', '0.25',
    '--kd-jasmin-weight', '1.0',
    '--kd-jasmin-k', '2',
    '--kd-ce-start-epoch', '0',
]
ARMS = {  # arm: (config, teacher flags)
    'free': (FREE_CONFIG, []),
    'plug_and_play': (SHELL_CONFIG, TRAJECTORY),
    'shell_ce': (SHELL_CONFIG, []),
    'shell_logit_kd': (SHELL_CONFIG, ['--kd-distill-type', 'logit']),
    'free_traj_ce0': (FREE_CONFIG, TRAJECTORY),
}


def train_command(arm: str, seed: int, args) -> list:
    config, teacher_flags = ARMS[arm]
    cmd = [
        sys.executable, '-m', 'tools.train',
        '--config', config,
        '--data-dir', args.data_dir,
        '--epochs', str(args.epochs),
        '--seed', str(seed),
        '--output', args.out,
        '--experiment', seed_key(arm, seed),
    ]
    if teacher_flags:
        cmd += ['--kd-model-name', f'local-dir:{TEACHER}'] + teacher_flags
    return cmd


def trainable_params(run: pathlib.Path) -> int:
    """The student's trainable parameters (its frozen shell left out), rebuilt from the run's selected checkpoint; a
    width projection the distillation task trains beside a student narrower than its teacher is not counted."""
    from timm_odevit.hub import model_from_checkpoint
    model = model_from_checkpoint(str(run / 'model_best.pth.tar'))[0]
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def run_one(arm: str, seed: int, args) -> dict:
    cmd = train_command(arm, seed, args)
    print(f'{seed_key(arm, seed)}: {" ".join(cmd)}', flush=True)
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get('PYTHONPATH')]))  # the checkout's package
    t0 = time.time()
    subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, 'PYTHONPATH': pythonpath})
    wall_s, run = round(time.time() - t0, 1), ROOT / args.out / seed_key(arm, seed)
    return {
        'arm': arm,
        'seed': seed,
        'epochs': args.epochs,
        'train_s': json.loads((run / 'train_time.json').read_text())['seconds'],
        'wall_s': wall_s,
        'trainable_params': trainable_params(run),
        **held_out_best(run),
        **test_top1(run, args.test_dir),
        'run_command': ' '.join(cmd[1:]),
        'config': ARMS[arm][0],
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--arms', nargs='+', default=list(ARMS), choices=list(ARMS))
    p.add_argument('--seeds', nargs='+', type=int, default=[0, 1, 2])
    p.add_argument('--epochs', type=int, default=3)
    p.add_argument('--data-dir', default='data/cifar10_holdout', help='train / val (held-out) split')
    p.add_argument('--test-dir', default=str(ROOT.parent / 'shared' / 'data' / 'cifar10'))
    p.add_argument('--out', default='output/plug_and_play')
    p.add_argument('--name', default='plug_and_play', help='results/NAME.json (another name for a smoke run)')
    p.add_argument('--again', action='store_true',
                   help='run finished (arm, seed) pairs again (e.g. on the machine of the other rows); the row each '
                        'replaces is kept under replaced_runs')
    args = p.parse_args()
    path = RESULTS / f'{args.name}.json'
    old = read_result(path) if path.is_file() else {}
    runs, replaced = old.get('runs', {}), old.get('replaced_runs', {})
    todo = [(arm, seed) for seed in args.seeds for arm in args.arms if args.again or seed_key(arm, seed) not in runs]
    for arm, seed in todo:  # one at a time: a row's wall time is its own
        key = seed_key(arm, seed)
        if key in runs:  # kept until its new row is written
            replaced.setdefault(key, []).append(runs[key])
        runs[key] = run_one(arm, seed, args)
        write_result(args.name, {
            'benchmark': 'plug_and_play',
            'teacher': TEACHER,
            'budget': f'{args.epochs} epochs of 45,000 images ({SHELL_CONFIG} recipe), selected on 5,000 held-out '
                      'images, scored on 10,000 test images',
            'runs': runs,
            **({'replaced_runs': replaced} if replaced else {}),
        })
        print(f'{seed_key(arm, seed)}: {runs[seed_key(arm, seed)]}', flush=True)


if __name__ == '__main__':
    main()
