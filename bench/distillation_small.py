"""Small real runs of trajectory distillation and odeify (CPU-sized; budget printed and saved).

1. teacher: a discrete timm ViT (vit_tiny_cifar_params_matched: 4 blocks, D 96) trained with CE.
2. scratch vs distilled at equal budget: odevit_tiny_cifar (4 Euler steps) trained with CE only,
   and with TrajectoryDistillationTask from the teacher (uniform mapping, CLS MSE + CE).
3. odeify: the teacher converted to one shared block (init 'mean', state-subtracted field,
   Euler h = 1), measured right after conversion, after CE fine-tuning, and after distillation
   from its own discrete original, all at equal budget.

    python bench/distillation_small.py [--train-per-class 400] [--test-per-class 200] [--epochs 3] [--seed 0] [--device cuda]

``--seed N`` (N > 0) re-runs everything with other seeds and adds ``name@seedN`` entries to the
results; the entries of other seeds are kept.
"""
import argparse
import copy

import timm
import torch
from timm.task import ClassificationTask

import timm_odevit  # noqa: F401
from timm_odevit import odeify
from timm_odevit.tasks import TrajectoryDistillationTask
from _data import DEFAULT_ROOT, load_split
from _train import accuracy, add_device_arg, fit
from _util import RESULTS, read_result, seed_key, seed_of, write_result


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--data', default=str(DEFAULT_ROOT))
    p.add_argument('--train-per-class', type=int, default=400)
    p.add_argument('--test-per-class', type=int, default=200)
    p.add_argument('--teacher-epochs', type=int, default=6)
    p.add_argument('--epochs', type=int, default=3)
    p.add_argument('--batch', type=int, default=128)
    p.add_argument('--lr', type=float, default=1e-3)
    p.add_argument('--seed', type=int, default=0, help='0: the seeds 0/1/2 of the committed run; N: 3N, 3N+1, 3N+2')
    add_device_arg(p)
    args = p.parse_args()
    seed = 3 * args.seed  # teacher, ODE-ViT students and odeified students each get their own seed
    train, test = load_split(args.data, 'train', args.train_per_class), load_split(args.data, 'test', args.test_per_class)
    results = {}

    torch.manual_seed(seed)
    teacher = timm.create_model('vit_tiny_cifar_params_matched').to(args.device)
    secs = fit(ClassificationTask(teacher, criterion_kwargs=dict(smoothing=0.1)), list(teacher.parameters()),
               train, args, seed, args.teacher_epochs)
    results['teacher_discrete_vit'] = {'top1': accuracy(teacher, test), 'train_s': secs,
                                       'params': sum(p.numel() for p in teacher.parameters())}
    print('teacher', results['teacher_discrete_vit'], flush=True)
    teacher.eval().requires_grad_(False)

    def train_student(name, student, distil, seed):
        """CE only, or trajectory distillation from (a copy of) the teacher; same budget either way."""
        kwargs = dict(criterion_kwargs=dict(smoothing=0.1))
        task = TrajectoryDistillationTask(student, copy.deepcopy(teacher), **kwargs) if distil \
            else ClassificationTask(student, **kwargs)
        task.to(args.device)  # the task's own modules (the distillation projections) too
        params = [p for p in task.get_trainable_module().parameters() if p.requires_grad]
        secs = fit(task, params, train, args, seed, args.epochs)
        results[name] = {'top1': accuracy(student, test), 'train_s': secs}
        print(name, results[name], flush=True)

    for name, distil in (('odevit_scratch', False), ('odevit_distilled', True)):
        torch.manual_seed(seed + 1)
        train_student(name, timm.create_model('odevit_tiny_cifar', steps=4).to(args.device), distil, seed=seed + 1)

    converted = odeify(teacher, init='mean').to(args.device).requires_grad_(True)
    results['odeified_at_conversion'] = {'top1': accuracy(converted, test),
                                         'params': sum(p.numel() for p in converted.parameters())}
    print('odeified', results['odeified_at_conversion'], flush=True)
    for name, distil in (('odeified_ce_finetune', False), ('odeified_self_distilled', True)):
        train_student(name, odeify(teacher, init='mean').to(args.device).requires_grad_(True), distil, seed=seed + 2)
    results = {seed_key(k, args.seed): v for k, v in results.items()}
    previous = RESULTS / 'distillation_small.json'
    if previous.exists():  # keep the other seeds' entries
        kept = read_result(previous)['results']
        results = {**{k: v for k, v in kept.items() if seed_of(k) != args.seed}, **results}
    path = write_result('distillation_small', {
        'benchmark': 'distillation_small',
        'budget': f'{10 * args.train_per_class} CIFAR-10 train images (first per class), teacher {args.teacher_epochs} '
                  f'epochs, students {args.epochs} epochs each, batch {args.batch}, AdamW lr {args.lr} one-cycle '
                  f'(10% warm-up), wd 0.05, flip + 4px crop, smoothing 0.1, clip 1; test on '
                  f'{10 * args.test_per_class} test images; CPU-sized',
        'results': results})
    print(f'wrote {path}')


if __name__ == '__main__':
    main()
