"""Throughput of ODE-ViT / bViT against a discrete timm ViT doing the same number of block evaluations.

For every (model, solver, steps) the baseline is a timm VisionTransformer of the same width,
heads, MLP ratio, tokens ([CLS] + registers + patches) and patch size whose depth equals the
block (vector-field) evaluations of one forward — for dopri5 the NFE it actually took. Both are
timed interleaved in the same run (inference and one train step: forward, CE, backward) and the
ratio ODE / discrete reported; the goal for fixed-step ODE-ViT is ≤ 1.05. `--compile` adds the
same comparison with both models wrapped in torch.compile (default inductor backend).

    python bench/throughput.py [--batch 64] [--repeats 9] [--compile] [--include-224]
"""
import argparse

import timm
import torch
from timm.models.vision_transformer import VisionTransformer

import timm_odevit  # noqa: F401
from _util import inference_step, time_interleaved, train_step, write_result

# (model, model kwargs, label); solver settings go in the kwargs
VARIANTS = [
    ('odevit_tiny_cifar', dict(solver='euler', steps=6), 'euler 6'),
    ('odevit_tiny_cifar', dict(solver='euler', steps=12), 'euler 12'),
    ('odevit_tiny_cifar', dict(solver='midpoint', steps=6), 'midpoint 6'),
    ('odevit_tiny_cifar', dict(solver='rk4', steps=3), 'rk4 3'),
    ('odevit_tiny_cifar', dict(solver='dopri5'), 'dopri5 rtol 1e-3'),
    ('bvit_tiny_cifar', dict(), 'recurrent 12'),
    ('bvit_tiny_cifar', dict(regime='ode', solver='euler', steps=12), 'ode euler 12'),
    ('bvit_tiny_cifar', dict(regime='ode', solver='rk4', steps=3), 'ode rk4 3'),
    ('odevit_small_cifar', dict(solver='euler', steps=12), 'euler 12'),
    ('bvit_small_cifar', dict(), 'recurrent 12'),
]
VARIANTS_224 = [
    ('odevit_small_patch16_224', dict(solver='euler', steps=12), 'euler 12'),
    ('odevit_base_patch16_224', dict(solver='euler', steps=12), 'euler 12'),
    ('bvit_base_patch16_224', dict(), 'recurrent 12'),
]
COMPILE_VARIANTS = ('euler 12',)


def discrete_twin(model, depth: int) -> VisionTransformer:
    """timm ViT with the model's width, heads, MLP ratio, tokens and patch size, and ``depth`` blocks."""
    attn = next(m for m in model.modules() if hasattr(m, 'num_heads'))
    fc1 = next(m for n, m in model.named_modules() if n.endswith('mlp.fc1'))
    return VisionTransformer(
        img_size=model.patch_embed.img_size, patch_size=model.patch_embed.patch_size, num_classes=model.num_classes,
        embed_dim=model.embed_dim, depth=depth, num_heads=attn.num_heads, mlp_ratio=fc1.out_features / model.embed_dim,
        reg_tokens=model.num_prefix_tokens - 1, no_embed_class=True)


def compare(ode, vit, x, y, repeats):
    def infer(m):
        return inference_step(m, x)

    def train(m):
        return train_step(lambda: torch.nn.functional.cross_entropy(m(x), y))

    out = {}
    for mode, wrap in (('inference', infer), ('train_step', train)):
        t = time_interleaved({'ode': wrap(ode), 'discrete': wrap(vit)}, repeats=repeats)
        out[mode] = {'ode_ms': 1e3 * t['ode']['median_s'], 'discrete_ms': 1e3 * t['discrete']['median_s'],
                     'ratio': t['ode']['median_s'] / t['discrete']['median_s'],
                     'ode_img_per_s': len(x) / t['ode']['median_s']}
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--batch', type=int, default=64)
    p.add_argument('--repeats', type=int, default=9)
    p.add_argument('--compile', action='store_true', help=f'also time {COMPILE_VARIANTS} under torch.compile')
    p.add_argument('--include-224', action='store_true', help='also the 224 px models (default on a GPU)')
    args = p.parse_args()
    device = 'cuda' if torch.cuda.is_available() else 'cpu'
    variants = VARIANTS + (VARIANTS_224 if args.include_224 or device == 'cuda' else [])
    rows = []
    print('| model | solver | block evals | inference ODE/discrete | train step ODE/discrete | ODE train img/s |')
    print('|---|---|---|---|---|---|')
    for name, kwargs, label in variants:
        torch.manual_seed(0)
        ode = timm.create_model(name, **kwargs).to(device)
        x = torch.randn(args.batch, *ode.pretrained_cfg['input_size'], device=device)
        y = torch.randint(0, ode.num_classes, (args.batch,), device=device)
        with torch.no_grad():
            ode(x)
        evals = ode.nfe
        vit = discrete_twin(ode, evals).to(device)
        settings = [('eager', ode, vit)]
        if args.compile and label in COMPILE_VARIANTS:
            settings.append(('compiled', torch.compile(ode), torch.compile(vit)))
        for mode, o, v in settings:
            try:
                res = compare(o, v, x, y, args.repeats)
            except Exception as e:  # report what torch.compile cannot do instead of hiding the row
                rows.append({'model': name, 'solver': label, 'mode': mode, 'block_evals': evals,
                             'error': f'{type(e).__name__}: {e}'[:300]})
                print(f'| {name} ({mode}) | {label} | {evals} | error: {rows[-1]["error"][:80]} | | |', flush=True)
                continue
            rows.append({'model': name, 'solver': label, 'mode': mode, 'block_evals': evals, **res})
            print(f'| {name}{" (compiled)" if mode == "compiled" else ""} | {label} | {evals} | '
                  f'{res["inference"]["ratio"]:.3f} | {res["train_step"]["ratio"]:.3f} | '
                  f'{res["train_step"]["ode_img_per_s"]:.0f} |', flush=True)
    path = write_result('throughput', {
        'benchmark': 'throughput', 'batch': args.batch, 'repeats': args.repeats,
        'baseline': 'timm VisionTransformer, same width/heads/MLP/tokens/patch, depth = block evaluations',
        'goal': 'fixed-step ODE-ViT ratio <= 1.05', 'rows': rows})
    print(f'wrote {path}')


if __name__ == '__main__':
    main()
