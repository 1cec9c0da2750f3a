"""Trajectory distillation vs scratch on CIFAR-10 at the accuracy_vs_params budget.

The student (odevit_tiny_cifar, 6 Euler steps) is trained with TrajectoryDistillationTask from a
discrete timm ViT teacher that accuracy_vs_params.py trained and saved (`--save-dir`), with the
same data, seed, recipe and epochs as the scratch run in bench/results/accuracy_vs_params.json,
which is the baseline (read, not re-run). Loss: CE + MSE between the projected student [CLS] at
its time points and the teacher's [CLS] after its blocks (uniform mapping).

    python bench/accuracy_vs_params.py --models vit_tiny_cifar_params_matched --save-dir checkpoints
    python bench/distillation_cifar10.py --teacher vit_tiny_cifar_params_matched --checkpoints checkpoints
"""
import argparse
import json
import pathlib

import timm
import torch

import timm_odevit  # noqa: F401
from timm_odevit.tasks import TrajectoryDistillationTask
from _data import DEFAULT_ROOT, load_split
from _train import accuracy, fit
from _util import RESULTS, write_result
from accuracy_vs_params import MODELS, build_parser, describe_budget


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--data', default=str(DEFAULT_ROOT))
    p.add_argument('--teacher', default='vit_tiny_cifar_params_matched', choices=list(MODELS))
    p.add_argument('--checkpoints', default='checkpoints', help='--save-dir of accuracy_vs_params.py')
    p.add_argument('--student', default='odevit_tiny_cifar', choices=list(MODELS))
    args = p.parse_args()
    baseline = json.loads((RESULTS / 'accuracy_vs_params.json').read_text())['runs']
    scratch, teacher_run = baseline[args.student], baseline[args.teacher]
    hp = build_parser().parse_args(['--data', args.data])  # the scratch run's recipe: equal budget

    arch, kwargs, _ = MODELS[args.teacher]
    teacher = timm.create_model(arch, **kwargs)
    teacher.load_state_dict(torch.load(pathlib.Path(args.checkpoints) / f'{args.teacher}.pth', map_location='cpu'))
    train = load_split(args.data, 'train', hp.train_per_class)
    val = load_split(args.data, 'train', hp.val_per_class, offset=hp.train_per_class)
    test = load_split(args.data, 'test', 1000)
    for run in (scratch, teacher_run):
        if run['budget'] != describe_budget(hp, len(train[0]), len(test[0])):
            raise SystemExit(f'{run["arch"]} in accuracy_vs_params.json was trained on another budget: {run["budget"]}')
    teacher_test = accuracy(teacher, test)
    if abs(teacher_test - teacher_run['test_top1']) > 0.01:
        raise SystemExit(f'teacher checkpoint gives {teacher_test:.2f}, accuracy_vs_params.json says '
                         f'{teacher_run["test_top1"]:.2f}: not the same teacher')

    arch, kwargs, _ = MODELS[args.student]
    torch.manual_seed(hp.seed)
    student = timm.create_model(arch, **kwargs)
    task = TrajectoryDistillationTask(student, teacher.requires_grad_(False), criterion_kwargs={'smoothing': 0.1})
    params = [q for q in task.get_trainable_module().parameters() if q.requires_grad]
    secs = fit(task, params, train, hp, hp.seed, hp.epochs, log=lambda m: print(f'distilled: {m}', flush=True))
    distilled = {'train_s': round(secs, 1), 'val_top1': accuracy(student, val), 'test_top1': accuracy(student, test)}
    rows = {
        'teacher': {'model': args.teacher, 'params_M': teacher_run['params_M'], 'test_top1': teacher_test},
        'scratch': {'model': args.student, 'kwargs': scratch['kwargs'], 'train_s': scratch['train_s'],
                    'val_top1': scratch['val_top1'], 'test_top1': scratch['test_top1']},
        'distilled': {'model': args.student, 'kwargs': kwargs, **distilled},
    }
    for name, r in rows.items():
        print(f'{name}: {r}')
    print(f'wrote {write_result("distillation_cifar10", {"benchmark": "distillation_cifar10", "budget": scratch["budget"], "mapping": "uniform", "tokens": "cls", "rows": rows, "gain_points": distilled["test_top1"] - scratch["test_top1"]})}')


if __name__ == '__main__':
    main()
