"""What ODE-ViT needs to train well at a small budget: one knob at a time on odevit_tiny_cifar.

Every variant is trained with the shared recipe (bench/_train.py), the same data order and seed
on a CIFAR-10 subset, scored on a held-out split carved from the training images (the next
``--holdout-per-class`` of each class, never trained on: where a knob is chosen) and on test images (which only
report); the discrete ViT of ODE-ViT's parameters (``vit_odevit_tiny_cifar_params_matched``) at the same budget is
the anchor. The default is the registered odevit_tiny_cifar at 6 Euler steps:
emulated depth s = 12 over t ∈ [0, 1], so each Euler step moves the state by h·s = 2 "blocks".
Knobs: the effective step h·s (depth_scale, steps), registers, attention type, learning rate,
and the field's norm (``field_norm='layer'``: LayerNorm instead of the paper's CenterNorm).
Rows accumulate in bench/results/odevit_ablation.json across invocations at the same budget.

    python bench/odevit_ablation.py [--train-per-class 1500] [--holdout-per-class 200] [--epochs 2]
                                    [--variants default lr_3e-4 ...] [--device cuda]
"""
import argparse

import timm
import torch

import timm_odevit  # noqa: F401
from _data import load_split
from _train import accuracy, add_holdout_arg, add_recipe_args, classification_task, fit, subset_budget
from _util import RESULTS, gflops, read_result, seed_key, write_result

# name -> (model, kwargs[, recipe overrides])
VARIANTS = {
    'default': ('odevit_tiny_cifar', {'steps': 6}),
    'lr_3e-4': ('odevit_tiny_cifar', {'steps': 6}, {'lr': 3e-4}),
    'depth_scale_6': ('odevit_tiny_cifar', {'steps': 6, 'depth_scale': 6.}),
    'depth_scale_3': ('odevit_tiny_cifar', {'steps': 6, 'depth_scale': 3.}),
    'depth_scale_24': ('odevit_tiny_cifar', {'steps': 6, 'depth_scale': 24.}),
    'steps_12': ('odevit_tiny_cifar', {'steps': 12}),
    'no_registers': ('odevit_tiny_cifar', {'steps': 6, 'reg_tokens': 0}),
    'l2_attention': ('odevit_tiny_cifar', {'steps': 6, 'attn_type': 'l2'}),
    'layernorm_field': ('odevit_tiny_cifar', {'steps': 6, 'field_norm': 'layer'}),
    'discrete_vit_odevit_params': ('vit_odevit_tiny_cifar_params_matched', {}),  # same budget, ODE-ViT's parameters
}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--variants', nargs='+', default=list(VARIANTS), choices=list(VARIANTS))
    add_recipe_args(p, train_per_class=1500, device=True)
    add_holdout_arg(p, 200)
    args = p.parse_args()
    train, test = load_split(args.data, 'train', args.train_per_class), load_split(args.data, 'test', args.test_per_class)
    holdout = load_split(args.data, 'train', args.holdout_per_class, offset=args.train_per_class)
    budget = (f'{subset_budget(args)}; held out: the next {10 * args.holdout_per_class} train images '
              f'({args.holdout_per_class}/class)')
    out = RESULTS / 'odevit_ablation.json'
    # rows of earlier invocations at the same budget are kept, so variants can be run one by one
    previous = read_result(out) if out.exists() else {}
    rows = {r['variant']: r for r in previous.get('rows', [])} if previous.get('budget') == budget else {}
    for variant in args.variants:
        arch, kwargs, *overrides = VARIANTS[variant]
        name = seed_key(variant, args.seed)  # rows of other seeds are kept
        recipe = argparse.Namespace(**{**vars(args), **(overrides[0] if overrides else {})})
        torch.manual_seed(args.seed)
        model = timm.create_model(arch, **kwargs)
        row = {'variant': name, 'seed': args.seed, 'model': arch, 'kwargs': kwargs, 'lr': recipe.lr,
               'params_M': sum(q.numel() for q in model.parameters()) / 1e6, 'gflops': gflops(model),
               'step_in_blocks': model.field.depth_scale * model.solver.h if hasattr(model, 'field') else None}
        try:
            row['train_s'] = fit(classification_task(model.to(args.device)), model.parameters(),
                                 train, recipe, args.seed, args.epochs,
                                 log=lambda m, name=name: print(f'{name}: {m}', flush=True))
            row['holdout_top1'], row['test_top1'] = accuracy(model, holdout), accuracy(model, test)
        except FloatingPointError as e:
            row['diverged'] = str(e)
        rows[name] = row
        print(name, row, flush=True)
        path = write_result('odevit_ablation', {'benchmark': 'odevit_ablation',
                                                'budget': budget, 'rows': list(rows.values())})
    print('| variant | kwargs | lr | params (M) | GFLOPs | h·s | held-out top-1 | test top-1 |\n|---|---|---|---|---|---|---|---|')
    for r in rows.values():
        print(f'| {r["variant"]} | {r["kwargs"]} | {r.get("lr", "-")} | {r["params_M"]:.3f} | {r["gflops"]:.3f} | {r["step_in_blocks"] or "-"} | '
              f'{r.get("holdout_top1", "-")} | {r.get("test_top1", "diverged")} |')
    print(f'wrote {path}')


if __name__ == '__main__':
    main()
