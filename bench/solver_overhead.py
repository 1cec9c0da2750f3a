"""Cost of integrating through torchdiffeq vs a plain Python loop of the same Euler steps.

Three ways to compute X(1) of odevit_tiny_cifar's field with N Euler steps, timed interleaved
in one run (ratios, since machines are noisy):
  loop       — for k in range(N): x = x + h·ψ(x)
  odeblock   — the model's depth stack, ``model.blocks`` (a ContinuousDepthStack), end point only
  full_grid  — torchdiffeq asked for the whole grid (odeint(func, x, linspace(0, 1, N+1)))

    python bench/solver_overhead.py [--batch 64] [--steps 12] [--repeats 15]
"""
import argparse

import timm
import torch
from torchdiffeq import odeint

import timm_odevit  # noqa: F401
from timm_odevit.models import embed_tokens
from _util import inference_step, time_interleaved, train_step, write_result


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--model', default='odevit_tiny_cifar')
    p.add_argument('--batch', type=int, default=64)
    p.add_argument('--steps', type=int, default=12)
    p.add_argument('--repeats', type=int, default=15)
    args = p.parse_args()
    torch.manual_seed(0)
    device = 'cuda' if torch.cuda.is_available() else 'cpu'
    model = timm.create_model(args.model, steps=args.steps).to(device)
    block, field = model.blocks, model.field
    x0 = embed_tokens(model, torch.randn(args.batch, *model.pretrained_cfg['input_size'], device=device)).detach()
    N, h = args.steps, 1.0 / args.steps
    grid = torch.linspace(0, 1, N + 1, device=device)

    def loop(x):
        for k in range(N):
            x = x + h * field(grid[k], x)
        return x

    ways = {
        'loop': loop,
        'odeblock': block,
        'full_grid': lambda x: odeint(field, x, grid, method='euler')[-1],
    }
    def infer(fn):
        return inference_step(fn, x0)

    def train(fn):
        return train_step(lambda: fn(x0.clone().requires_grad_(True)).square().mean())

    # all three compute the same state
    with torch.no_grad():
        ref = loop(x0)
        for fn in ways.values():
            torch.testing.assert_close(fn(x0), ref, rtol=1e-4, atol=1e-5)

    results = {}
    for mode, wrap in (('inference', infer), ('train_step', train)):
        t = time_interleaved({n: wrap(fn) for n, fn in ways.items()}, repeats=args.repeats)
        base = t['loop']['median_s']
        for n in t:
            t[n]['ratio_vs_loop'] = t[n]['median_s'] / base
        results[mode] = t
        print(f'{mode:10s} ' + '  '.join(f'{n}: {v["median_s"] * 1e3:7.1f} ms ({v["ratio_vs_loop"]:.3f}x)'
                                          for n, v in t.items()))
    path = write_result('solver_overhead', {
        'benchmark': 'solver_overhead', 'model': args.model, 'batch': args.batch, 'steps': N,
        'method': 'euler', 'results': results,
        'goal': 'odeblock / loop <= 1.05',
    })
    print(f'wrote {path}')


if __name__ == '__main__':
    main()
