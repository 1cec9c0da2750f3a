"""Does the classifier's initialisation change accuracy under the reference recipe? (issue 25)

odevit_tiny_cifar (6 Euler steps) with the default head init (timm's ViT: trunc-normal std 0.02) against
the same model with the reference code's spectral-norm-1 head (``head_init='spectral'``), with the depth scale s
carried by the weights (``ours_sqrtdepth``: bench/sgd_divergence.py's 'sqrtdepth', the same function at init, a lower
loss sharpness there) and against the
authors' ``ViTNeuralODE`` built identically (bench/odevit_parity.py; needs ``--reference-dir``), each
trained with the shared recipe (bench/_train.py: AdamW 1e-3 one-cycle, wd 0.05, clip 1, smoothing 0.1,
flip + crop) on the same data, data order and seeds. Test top-1 per run; rows accumulate across
invocations at the same budget.

    ../.venv/bin/python head_init_accuracy.py --variants ours ours_spectral_head --seeds 0 1 2
    ../.venv/bin/python head_init_accuracy.py --variants reference --reference-dir /path/to/ODE-ViT
"""
import argparse
import json
import pathlib
import statistics

import timm
import torch

import timm_odevit  # noqa: F401
from _data import load_split
from _train import accuracy, add_recipe_args, classification_task, fit, subset_budget
from _util import RESULTS, read_result, write_result
from odevit_parity import STEPS, ReferenceClassifier, load_reference
from sgd_divergence import apply_variant

VARIANTS = ('ours', 'ours_spectral_head', 'ours_sqrtdepth', 'reference')


def build(variant: str, reference_module) -> torch.nn.Module:
    if variant == 'reference':
        return ReferenceClassifier(reference_module, final_norm=False)
    head_init = 'spectral' if variant == 'ours_spectral_head' else 'trunc_normal'
    model = timm.create_model('odevit_tiny_cifar', steps=STEPS, head_init=head_init)
    if variant == 'ours_sqrtdepth':  # the depth scale s carried by the weights: the same function at init
        apply_variant(model, 'sqrtdepth')
    return model


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--variants', nargs='+', default=['ours', 'ours_spectral_head'], choices=VARIANTS)
    p.add_argument('--seeds', nargs='+', type=int, default=[0, 1, 2])
    p.add_argument('--reference-dir', type=pathlib.Path, default=None, help='checkout of github.com/Bycarkos/ODE-ViT')
    p.add_argument('--threads', type=int, default=1)
    add_recipe_args(p, train_per_class=300, test_per_class=100, device=True)
    p.set_defaults(epochs=3, batch=64)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    reference = load_reference(args.reference_dir) if 'reference' in args.variants else None
    train = load_split(args.data, 'train', args.train_per_class)
    test = load_split(args.data, 'test', args.test_per_class)
    budget = subset_budget(args) + f'; {STEPS} Euler steps; {args.threads} CPU thread(s) per run'
    out = RESULTS / 'head_init_accuracy.json'

    def earlier_rows() -> dict:
        previous = read_result(out) if out.exists() else {}
        return {(r['variant'], r['seed']): r for r in previous.get('rows', [])} \
            if previous.get('budget') == budget else {}

    rows = earlier_rows()
    for variant in args.variants:
        for seed in args.seeds:
            torch.manual_seed(seed)
            model = build(variant, reference).to(args.device)
            seconds = fit(classification_task(model), model.parameters(), train, args, seed, args.epochs,
                          log=lambda m, v=variant, s=seed: print(f'{v} seed {s}: {m}', flush=True))
            row = {'variant': variant, 'seed': seed, 'test_top1': accuracy(model, test), 'train_s': round(seconds)}
            print(row, flush=True)
            rows = {**earlier_rows(), (variant, seed): row}
            summary = {}
            for v in VARIANTS:
                accs = [r['test_top1'] for r in rows.values() if r['variant'] == v]
                if accs:
                    summary[v] = {'mean': round(statistics.mean(accs), 2), 'min': min(accs), 'max': max(accs),
                                  'seeds': len(accs)}
            path = write_result('head_init_accuracy', {
                'benchmark': 'head_init_accuracy', 'budget': budget, 'summary': summary,
                'rows': sorted(rows.values(), key=lambda r: (VARIANTS.index(r['variant']), r['seed']))})
    print(json.dumps(summary, indent=1))
    print(f'wrote {path}')


if __name__ == '__main__':
    main()
