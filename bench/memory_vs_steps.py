"""Peak training memory vs number of steps: direct backprop, grad checkpointing, adjoint.

Each configuration runs one forward + backward of odevit_tiny_cifar (batch 32, Euler) in a fresh
subprocess; on CPU the peak resident set size (ru_maxrss) is measured and the idle baseline of the
same process (torch imported, model built) subtracted; on CUDA torch.cuda.max_memory_allocated.

    python bench/memory_vs_steps.py [--steps 4 8 16 32] [--batch 32]
"""
import argparse

from _util import peak_train_memory_mib, write_result

BUILD = ("model = timm.create_model('odevit_tiny_cifar', steps={steps}, adjoint={adjoint})\n"
         "model.set_grad_checkpointing({ckpt})")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--steps', type=int, nargs='+', default=[4, 8, 16, 32])
    p.add_argument('--batch', type=int, default=32)
    args = p.parse_args()
    modes = ('direct', 'grad_checkpointing', 'adjoint')
    rows = []
    print('| steps | ' + ' | '.join(f'{m} (MiB)' for m in modes) + ' |')
    print('|---|' + '---|' * len(modes))
    for steps in args.steps:
        row = {'steps': steps}
        for mode in modes:
            build = BUILD.format(steps=steps, adjoint=mode == 'adjoint', ckpt=mode == 'grad_checkpointing')
            row[mode] = peak_train_memory_mib(build, args.batch)
        rows.append(row)
        print(f'| {steps} | ' + ' | '.join(f'{row[m]:.0f}' for m in modes) + ' |', flush=True)
    print(f'wrote {write_result("memory_vs_steps", {"benchmark": "memory_vs_steps", "batch": args.batch, "model": "odevit_tiny_cifar", "solver": "euler", "rows": rows})}')


if __name__ == '__main__':
    main()
