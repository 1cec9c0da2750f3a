"""Peak training memory vs number of steps: direct backprop, grad checkpointing, adjoint.

Each configuration runs one forward + backward of odevit_tiny_cifar (batch 32, Euler) in a fresh
subprocess; on CPU the peak resident set size (ru_maxrss) is measured and the idle baseline of the
same process (torch imported, model built) subtracted; on CUDA torch.cuda.max_memory_allocated.

    python bench/memory_vs_steps.py [--steps 4 8 16 32] [--batch 32]
"""
import argparse
import json
import subprocess
import sys

from _util import write_result

CHILD = r'''
import json, resource, sys, torch, timm, timm_odevit
steps, batch, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
dev = 'cuda' if torch.cuda.is_available() else 'cpu'
model = timm.create_model('odevit_tiny_cifar', steps=steps, adjoint=(mode == 'adjoint')).to(dev)
model.set_grad_checkpointing(mode == 'grad_checkpointing')
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
            out = subprocess.run([sys.executable, '-c', CHILD, str(steps), str(args.batch), mode],
                                 capture_output=True, text=True, check=True)
            row[mode] = json.loads(out.stdout.strip().splitlines()[-1])['peak_mib']
        rows.append(row)
        print(f'| {steps} | ' + ' | '.join(f'{row[m]:.0f}' for m in modes) + ' |', flush=True)
    print(f'wrote {write_result("memory_vs_steps", {"benchmark": "memory_vs_steps", "batch": args.batch, "model": "odevit_tiny_cifar", "solver": "euler", "rows": rows})}')


if __name__ == '__main__':
    main()
