"""Peak training memory with and without ``set_grad_checkpointing()`` for every family, vs depth.

One forward + backward at batch ``--batch`` in a fresh subprocess per setting; on CPU the peak resident
set size (ru_maxrss) minus the same process's level before the step (torch imported, model built), on
CUDA ``torch.cuda.max_memory_allocated``. Families: odevit_tiny_cifar (Euler), bvit_tiny_cifar
(recurrent), and vit_odeified (a timm ViT-Tiny at 32 px / patch 4 converted by odeify, whose
``set_grad_checkpointing`` is timm's own: timm checkpoints each interval with ``checkpoint_seq``).

    python bench/grad_checkpointing_memory.py [--steps 4 8 16] [--batch 32]
"""
import argparse

from _util import peak_train_memory_mib, write_result

BUILD = {
    'odevit_tiny_cifar': "model = timm.create_model('odevit_tiny_cifar', steps={steps})",
    'bvit_tiny_cifar': "model = timm.create_model('bvit_tiny_cifar', iterations={steps})",
    'vit_odeified': ("model = timm.create_model('vit_odeified', base='vit_tiny_patch16_224', img_size=32, patch_size=4, "
                     "depth={steps}, num_classes=10)"),
}

FAMILIES = tuple(BUILD)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--steps', type=int, nargs='+', default=[4, 8, 16])
    p.add_argument('--batch', type=int, default=32)
    p.add_argument('--families', nargs='+', default=list(FAMILIES), choices=FAMILIES)
    args = p.parse_args()
    rows = []
    print('| family | steps | without (MiB) | with grad checkpointing (MiB) | ratio |')
    print('|---|---|---|---|---|')
    for family in args.families:
        for steps in args.steps:
            row = {'family': family, 'steps': steps}
            for key, ckpt in (('without_mib', False), ('with_mib', True)):
                build = BUILD[family].format(steps=steps) + f'\nmodel.set_grad_checkpointing({ckpt})'
                row[key] = peak_train_memory_mib(build, args.batch)
            row['ratio'] = row['with_mib'] / row['without_mib']
            rows.append(row)
            print(f'| {family} | {steps} | {row["without_mib"]:.0f} | {row["with_mib"]:.0f} | {row["ratio"]:.2f} |',
                  flush=True)
    path = write_result('grad_checkpointing_memory', {
        'benchmark': 'grad_checkpointing_memory', 'batch': args.batch, 'rows': rows})
    print(f'wrote {path}')


if __name__ == '__main__':
    main()
