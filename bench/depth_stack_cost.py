"""What the pure-interval depth stack (issue 25) costs against the cached-interval stack it replaced.

Each round runs two fresh subprocesses, one importing the package as it was at ``--old`` (a git commit,
exported with ``git archive``) and one the working tree, in alternating order; each times, for
odevit_tiny_cifar (Euler, ``--steps``) at batch ``--batch``, the median over ``--repeats`` calls of:
the one-call forward (eval, no grad), a train step (forward + backward), and forward_intermediates of
every interval (eval, no grad). The ratio new / old is taken within each round (this machine is noisy);
median and range over the rounds are reported.

    python bench/depth_stack_cost.py [--old f278510] [--rounds 5] [--repeats 15]
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

from _util import write_result

ROOT = pathlib.Path(__file__).resolve().parents[1]

CHILD = r'''
import json, sys, time, statistics, torch, timm
import timm_odevit
steps, batch, repeats = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(0)
model = timm.create_model('odevit_tiny_cifar', steps=steps)
x = torch.randn(batch, 3, 32, 32)

def timed(fn):
    fn()
    out = []
    for _ in range(repeats):
        t = time.perf_counter(); fn(); out.append(time.perf_counter() - t)
    return statistics.median(out)

def forward():
    model.eval()
    with torch.no_grad():
        model(x)

def train_step():
    model.train(); model.zero_grad(); model(x).sum().backward()

def intermediates():
    model.eval()
    with torch.no_grad():
        model.forward_intermediates(x, indices=steps)

print(json.dumps({'path': timm_odevit.__file__, 'forward': timed(forward), 'train_step': timed(train_step),
                  'forward_intermediates': timed(intermediates)}))
'''

METRICS = ('forward', 'train_step', 'forward_intermediates')


def _run(pythonpath: str, args) -> dict:
    env = dict(os.environ, PYTHONPATH=pythonpath)
    out = subprocess.run([sys.executable, '-c', CHILD, str(args.steps), str(args.batch), str(args.repeats)],
                         capture_output=True, text=True, check=True, env=env, cwd=tempfile.gettempdir())
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--old', default='f278510', help='git commit of the stack to compare against')
    p.add_argument('--steps', type=int, default=6)
    p.add_argument('--batch', type=int, default=32)
    p.add_argument('--rounds', type=int, default=5)
    p.add_argument('--repeats', type=int, default=15)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as old_dir:
        archive = subprocess.run(['git', '-C', str(ROOT), 'archive', args.old, 'timm_odevit'],
                                 capture_output=True, check=True).stdout
        subprocess.run(['tar', '-x', '-C', old_dir], input=archive, check=True)
        rounds = []
        for r in range(args.rounds):
            order = [('old', old_dir), ('new', str(ROOT))]
            order = order if r % 2 == 0 else order[::-1]
            times = {name: _run(path, args) for name, path in order}
            assert times['old']['path'].startswith(old_dir) and times['new']['path'].startswith(str(ROOT))
            rounds.append({m: {'old_s': times['old'][m], 'new_s': times['new'][m],
                               'ratio': times['new'][m] / times['old'][m]} for m in METRICS})
            print(f'round {r}: ' + ', '.join(f'{m} x{rounds[-1][m]["ratio"]:.3f}' for m in METRICS), flush=True)
    summary = {}
    print('| call | old (ms, median) | new (ms, median) | new / old: median | range |')
    print('|---|---|---|---|---|')
    for m in METRICS:
        ratios = [r[m]['ratio'] for r in rounds]
        summary[m] = dict(old_ms=1e3 * statistics.median(r[m]['old_s'] for r in rounds),
                          new_ms=1e3 * statistics.median(r[m]['new_s'] for r in rounds),
                          ratio_median=statistics.median(ratios), ratio_min=min(ratios), ratio_max=max(ratios))
        s = summary[m]
        print(f'| {m} | {s["old_ms"]:.1f} | {s["new_ms"]:.1f} | {s["ratio_median"]:.3f} | '
              f'{s["ratio_min"]:.3f}–{s["ratio_max"]:.3f} |')
    path = write_result('depth_stack_cost', {
        'benchmark': 'depth_stack_cost', 'model': 'odevit_tiny_cifar', 'solver': 'euler', 'steps': args.steps,
        'batch': args.batch, 'repeats': args.repeats, 'old_commit': args.old, 'rounds': rounds, 'summary': summary})
    print(f'wrote {path}')


if __name__ == '__main__':
    main()
