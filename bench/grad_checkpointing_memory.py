"""Peak training memory with and without ``set_grad_checkpointing()`` for every family, vs depth.

One forward + backward at batch ``--batch`` in a fresh subprocess per setting; on CPU the peak resident
set size (ru_maxrss) minus the same process's level before the step (torch imported, model built), on
CUDA ``torch.cuda.max_memory_allocated``. Families: odevit_tiny_cifar (Euler), bvit_tiny_cifar
(recurrent), and vit_odeified (a timm ViT-Tiny at 32 px / patch 4 converted by odeify, whose
``set_grad_checkpointing`` is timm's own: timm checkpoints each interval with ``checkpoint_seq``).

    python bench/grad_checkpointing_memory.py [--steps 4 8 16] [--batch 32]
"""
import argparse
import json
import subprocess
import sys

from _util import write_result

CHILD = r'''
import json, resource, sys, torch, timm, timm_odevit
family, steps, batch, ckpt = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == '1'
dev = 'cuda' if torch.cuda.is_available() else 'cpu'
if family == 'odevit_tiny_cifar':
    model = timm.create_model(family, steps=steps)
elif family == 'bvit_tiny_cifar':
    model = timm.create_model(family, iterations=steps)
else:
    model = timm.create_model('vit_odeified', base='vit_tiny_patch16_224', img_size=32, patch_size=4, depth=steps,
                              num_classes=10)
model = model.to(dev).train()
model.set_grad_checkpointing(ckpt)
x = torch.randn(batch, 3, 32, 32, device=dev)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if dev == 'cuda':
    torch.cuda.reset_peak_memory_stats(); base_cuda = torch.cuda.memory_allocated()
model(x).sum().backward()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out = {'peak_mib': (peak - base) / 1024}
if dev == 'cuda':
    out['peak_mib'] = (torch.cuda.max_memory_allocated() - base_cuda) / 2 ** 20
print(json.dumps(out))
'''

FAMILIES = ('odevit_tiny_cifar', 'bvit_tiny_cifar', 'vit_odeified')


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
            for key, flag in (('without_mib', '0'), ('with_mib', '1')):
                out = subprocess.run([sys.executable, '-c', CHILD, family, str(steps), str(args.batch), flag],
                                     capture_output=True, text=True, check=True)
                row[key] = json.loads(out.stdout.strip().splitlines()[-1])['peak_mib']
            row['ratio'] = row['with_mib'] / row['without_mib']
            rows.append(row)
            print(f'| {family} | {steps} | {row["without_mib"]:.0f} | {row["with_mib"]:.0f} | {row["ratio"]:.2f} |',
                  flush=True)
    path = write_result('grad_checkpointing_memory', {
        'benchmark': 'grad_checkpointing_memory', 'batch': args.batch, 'rows': rows})
    print(f'wrote {path}')


if __name__ == '__main__':
    main()
