"""What ODE-ViT's state and attention do along t during training, and what a final norm changes.

Trains odevit_tiny_cifar (6 Euler steps, s = 12) as the paper builds it (CenterNorm field, the head
reading X(1) directly), with a LayerNorm field (``field_norm='layer'``), and each of them with a
LayerNorm between X(1) and the head (``final_norm=True``, not the paper's), plus the discrete ViT of
equal parameters as anchor, all with the shared recipe (bench/_train.py) on a CIFAR-10 subset.
Every ``--probe-every`` optimiser steps it integrates a fixed probe batch and records, at each grid
point t_k, the RMS of the state X(t_k) and the mean entropy (nats) of the attention the field
applies there (uniform over N tokens = ln N). CenterNorm does not divide by the scale, so if the
state grows along t the attention logits grow with its square and the softmax saturates; a final
norm hides the scale of X(1) from the loss, so nothing holds that growth back.
Rows of other variants at the same budget are kept, so variants can run one by one.

    python bench/odevit_stability.py [--train-per-class 1000] [--epochs 2]
"""
import argparse
import math

import timm
import torch

import timm_odevit  # noqa: F401
from timm_odevit.analysis import attention_maps, trajectory
from _data import load_split
from _train import accuracy, add_recipe_args, classification_task, fit, subset_budget
from _util import RESULTS, read_result, seed_key, write_result

VARIANTS = {
    'centernorm_field': ('odevit_tiny_cifar', {'steps': 6}),
    'layernorm_field': ('odevit_tiny_cifar', {'steps': 6, 'field_norm': 'layer'}),
    # a LayerNorm between X(1) and the head (not the paper's): the loss no longer sees the scale of X(1)
    'centernorm_field_final_norm': ('odevit_tiny_cifar', {'steps': 6, 'final_norm': True}),
    'layernorm_field_final_norm': ('odevit_tiny_cifar', {'steps': 6, 'field_norm': 'layer', 'final_norm': True}),
    'anchor_discrete_vit': ('vit_tiny_cifar_params_matched', {}),
}


def probe(model, x):
    """Per time point t_0..t_P: state RMS and mean attention entropy (nats) on the probe batch."""
    states = trajectory(model, x)
    probs = attention_maps(model, states)  # (P + 1, B, H, N, N)
    entropy = -(probs * probs.clamp_min(1e-12).log()).sum(-1).mean(dim=(1, 2, 3))
    model.train()
    return {'state_rms': [round(v, 4) for v in states.pow(2).mean(dim=(1, 2, 3)).sqrt().tolist()],
            'attn_entropy': [round(v, 4) for v in entropy.tolist()]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--variants', nargs='+', default=['centernorm_field', 'layernorm_field', 'anchor_discrete_vit'],
                   choices=list(VARIANTS))
    p.add_argument('--probe-every', type=int, default=20)
    add_recipe_args(p, train_per_class=1000)
    args = p.parse_args()
    train, test = load_split(args.data, 'train', args.train_per_class), load_split(args.data, 'test', args.test_per_class)
    probe_x = train[0][::len(train[0]) // 8][:8]
    out = RESULTS / 'odevit_stability.json'
    budget = subset_budget(args)

    def earlier_rows() -> dict:  # rows of other variants at the same budget are kept
        previous = read_result(out) if out.exists() else {}
        return {r['variant']: r for r in previous.get('rows', [])} if previous.get('budget') == budget else {}

    num_tokens = None
    for variant in args.variants:
        arch, kwargs = VARIANTS[variant]
        name = seed_key(variant, args.seed)  # rows of other seeds are kept
        torch.manual_seed(args.seed)
        model = timm.create_model(arch, **kwargs)
        row = {'variant': name, 'seed': args.seed, 'model': arch, 'kwargs': kwargs, 'probes': []}
        is_ode = hasattr(model, 'field')
        if is_ode:
            num_tokens = model.num_prefix_tokens + model.patch_embed.num_patches

        def on_step(step, loss, name=name, model=model, row=row, is_ode=is_ode):
            if step % args.probe_every == 0:
                entry = {'step': step, 'loss': round(loss, 4)}
                if is_ode:
                    entry.update(probe(model, probe_x))
                row['probes'].append(entry)
                print(name, entry, flush=True)

        row['train_s'] = round(fit(classification_task(model), model.parameters(), train, args, args.seed, args.epochs,
                                   on_step=on_step), 1)
        row['test_top1'] = accuracy(model, test)
        if is_ode:
            row['final'] = probe(model, probe_x)
        print(name, 'test', row['test_top1'], flush=True)
        rows = list({**earlier_rows(), name: row}.values())
        uniform = f'uniform attention entropy ln({num_tokens}) = {math.log(num_tokens):.3f}' if num_tokens else ''
        path = write_result('odevit_stability', {
            'benchmark': 'odevit_stability', 'budget': budget,
            'probe': f'8 training images, eval mode, every {args.probe_every} steps; {uniform}', 'rows': rows})
    print('| variant | test top-1 | state RMS t_0 → t_6 (end) | attention entropy t_0 → t_6 (end) |\n|---|---|---|---|')
    for r in rows:
        f = r.get('final')
        print(f'| {r["variant"]} | {r["test_top1"]:.2f} | '
              + (f'{f["state_rms"][0]:.2f} → {f["state_rms"][-1]:.2f} | {f["attn_entropy"][0]:.2f} → '
                 f'{f["attn_entropy"][-1]:.2f} |' if f else '- | - |'))
    print(f'wrote {path}')


if __name__ == '__main__':
    main()
