"""Params and FLOPs of every registered timm_odevit model (and its matched baselines), measured (``vit_odeified``
converts a base given by name, so it has no architecture of its own to count).

ODE-ViT models whose registered default is not the trained grid get a second row at 6 Euler steps
(every ODE-ViT accuracy, matched baseline and release is trained on that grid).

FLOPs: one forward at batch 1 and the default input size, counted by torch.utils.flop_counter with the
attention products included (tools.card_extras.gmacs; a multiply-add = 2 FLOPs); GFLOPs reported. Prints a markdown table and writes
bench/results/model_table.json.

    python bench/model_table.py
"""
import timm

import timm_odevit  # noqa: F401
from _util import gflops, write_result


TRAINED_STEPS = 6  # the Euler grid every ODE-ViT accuracy, baseline match and release is trained on


def describe(name: str, **kwargs) -> dict:
    model = timm.create_model(name, **kwargs).eval()
    cfg = model.pretrained_cfg
    row = {
        'model': name,
        'model_kwargs': kwargs,
        'params_M': sum(p.numel() for p in model.parameters()) / 1e6,
        'gflops': gflops(model),
        'input': cfg['input_size'][-1],
        'num_classes': model.num_classes,
    }
    attn = next(m for m in model.modules() if hasattr(m, 'num_heads'))
    mlp_fc1 = next(m for n, m in model.named_modules() if n.endswith('mlp.fc1'))
    row.update(dim=model.embed_dim, heads=attn.num_heads, mlp_ratio=mlp_fc1.out_features / model.embed_dim)
    stack = model if hasattr(model, 'nfe') else model.blocks  # an odeify model keeps its solver on its blocks
    solver = getattr(stack, 'solver', None)
    # block (or field) evaluations per forward: independent blocks, iterations or solver NFE
    row['block_evals'] = stack.nfe if hasattr(stack, 'nfe') else len(model.blocks)
    row['regime'] = getattr(model, 'regime', 'ode' if solver is not None else 'discrete')
    if hasattr(model, 'patch_embed'):  # pixels per token side (a conv stem's stride and its patch together)
        row.update(patch=row['input'] // model.patch_embed.grid_size[0],
                   tokens=model.patch_embed.num_patches + getattr(model, 'num_prefix_tokens', 1))
    if solver is not None:
        row.update(solver=solver.method, steps=solver.steps)
    return row


def main():
    names = timm.list_models(module=['odevit', 'odeified', 'bvit', 'baselines'], exclude_filters=['vit_odeified'])
    rows = []
    for n in names:
        rows.append(describe(n))
        if rows[-1].get('solver') == 'euler' and rows[-1]['steps'] != TRAINED_STEPS and n.startswith('odevit_'):
            rows.append(describe(n, steps=TRAINED_STEPS))  # the trained grid, beside the registered default
    cols = ['model', 'regime', 'dim', 'heads', 'mlp_ratio', 'patch', 'tokens', 'solver', 'steps', 'block_evals',
            'params_M', 'gflops']
    print('| ' + ' | '.join(cols) + ' |')
    print('|' + '---|' * len(cols))
    for r in rows:
        cells = []
        for c in cols:
            if c == 'model' and r['model_kwargs']:
                cells.append(r['model'] + ' (' + ', '.join(f'{k}={v}' for k, v in r['model_kwargs'].items()) + ')')
                continue
            v = r.get(c, '–')
            cells.append(f'{v:.3f}' if isinstance(v, float) and c in ('params_M', 'gflops') else
                         f'{v:g}' if isinstance(v, float) else str(v))
        print('| ' + ' | '.join(cells) + ' |')
    print(f'wrote {write_result("model_table", {"benchmark": "model_table", "rows": rows})}')


if __name__ == '__main__':
    main()
