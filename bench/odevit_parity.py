"""Parity with the authors' code: our odevit_tiny_cifar vs the reference ``ViTNeuralODE``, one recipe.

Both models are built identically (D 256, 4 heads, MLP x2, patch 4, [CLS] + 10 registers without
position embedding, no biases in the field, emulated depth 12 over t in [0, 1], 6 Euler steps on
linspace(0, 1, 7), head on the [CLS] token of X(1)) and trained with the shared recipe
(bench/_train.py) on the same data, data order and seed. Reported per run: test top-1 and the
RMS of the state at t = 0 and t = 1 on 8 training images after training. Variants add a
LayerNorm between X(1) and the head to either model (``final_norm=True`` for ours): the measured
cost of that deviation. Before training, our weights are copied into the reference model and the
two forwards are compared (``max_logit_diff``).

``ours`` is the registered model (timm's trunc-normal classifier init); ``ours_spectral_head`` starts from the
reference's spectral-norm-1 head (``head_init='spectral'``), the like-for-like pair of ``reference``. Rows record
their head init.

The reference code is not part of this project. Pass a checkout of it:

    git clone https://github.com/Bycarkos/ODE-ViT /path/to/ODE-ViT
    python bench/odevit_parity.py --reference-dir /path/to/ODE-ViT [--variants ours_spectral_head reference ours]
                                  [--seeds 0 1 2] [--device cuda]

Rows accumulate in bench/results/odevit_parity.json across invocations at the same budget, so
variants can run in separate processes (``--threads 1`` each, the default).
"""
import argparse
import importlib.util
import pathlib
import sys
import types
from typing import Optional

import timm
import torch
from torch import nn

import timm_odevit  # noqa: F401
from timm_odevit.analysis import trajectory
from _data import load_split
from _train import accuracy, add_recipe_args, classification_task, fit, subset_budget
from _util import RESULTS, read_result, write_result

STEPS = 6
MODEL_ARGS = dict(img_size=32, patch_size=4, embed_dim=256, num_heads=4, mlp_ratio=2., num_classes=10)
VARIANTS = {  # name -> (implementation, LayerNorm before the head, our head init)
    'ours': ('ours', False, 'trunc_normal'),
    'ours_spectral_head': ('ours', False, 'spectral'),
    'reference': ('reference', False, None),
    'ours_final_norm': ('ours', True, 'trunc_normal'),
    'reference_final_norm': ('reference', True, None),
}
REFERENCE_FILE = pathlib.Path('models') / 'ode_transformer_gpt.py'


def load_reference(reference_dir: pathlib.Path):
    """The reference's model module, imported from a checkout (its unused ``import utils`` stubbed:
    the repository's utils.py needs wandb, torch_pca, ... which the model does not use)."""
    path = reference_dir / REFERENCE_FILE
    if not path.is_file():
        raise SystemExit(
            f'error: {path} not found. --reference-dir must be a checkout of the reference code:\n'
            '    git clone https://github.com/Bycarkos/ODE-ViT /path/to/ODE-ViT\n'
            '(offline: any copy of the repository; only models/ode_transformer_gpt.py is imported).')
    sys.modules.setdefault('utils', types.ModuleType('utils'))
    spec = importlib.util.spec_from_file_location('odevit_reference_model', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class ReferenceClassifier(nn.Module):
    """The reference ``ViTNeuralODE`` as a plain image -> logits module (its forward returns a dict)."""

    def __init__(self, module, final_norm: bool):
        super().__init__()
        a = MODEL_ARGS
        self.net = module.ViTNeuralODE(
            img_size=a['img_size'], patch_size=a['patch_size'], num_classes=a['num_classes'],
            embed_dim=a['embed_dim'], num_heads=a['num_heads'], mlp_ratio=a['mlp_ratio'],
            emulate_depth=12, time_interval=1.0, num_eval_steps=STEPS + 1, solver='euler',
            l2_attention=False, register_tokens=10, pos_embed_register_tokens=False)
        if final_norm:  # LayerNorm is per token, so norming only the pooled [CLS] equals a final norm
            self.net.head = nn.Sequential(nn.LayerNorm(a['embed_dim']), self.net.head)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)['logits']

    @torch.no_grad()
    def states(self, x: torch.Tensor) -> torch.Tensor:
        """(STEPS + 1, B, N, D): X(t_0) ... X(t_STEPS)."""
        self.eval()
        return self.net(x, output_hidden_states=True)['states']


def build(impl: str, final_norm: bool, reference_module, head_init: Optional[str] = None) -> nn.Module:
    if impl == 'ours':
        return timm.create_model('odevit_tiny_cifar', steps=STEPS, final_norm=final_norm,
                                 **({'head_init': head_init} if head_init else {}))
    return ReferenceClassifier(reference_module, final_norm)


@torch.no_grad()
def copy_into_reference(ours: nn.Module, ref: ReferenceClassifier) -> None:
    """Our (final_norm=False) weights into the reference model, name by name."""
    net, field, R = ref.net, ours.field, ours.num_reg_tokens
    pe, blk = net.patch_embed, net.odefunc.block
    pairs = [
        (pe.proj.weight, ours.patch_embed.proj.weight), (pe.proj.bias, ours.patch_embed.proj.bias),
        (pe.cls_token, ours.cls_token), (pe.register_tokens, ours.reg_token[0]),
        (pe.pos_embed[:, :ours.pos_embed.shape[1]], ours.pos_embed),
        (blk.norm_attn.weight, field.norm_attn.weight), (blk.norm_attn.bias, field.norm_attn.bias),
        (blk.attn.mha.in_proj_weight, field.attn.qkv.weight), (blk.attn.mha.out_proj.weight, field.attn.proj.weight),
        (blk.norm_mlp.weight, field.norm_mlp.weight), (blk.norm_mlp.bias, field.norm_mlp.bias),
        (blk.mlp.fc1.weight, field.mlp.fc1.weight), (blk.mlp.fc2.weight, field.mlp.fc2.weight),
        (net.head.weight, ours.head.weight), (net.head.bias, ours.head.bias),
    ]
    assert R == pe.num_register_tokens
    for dst, src in pairs:
        dst.copy_(src)


def state_rms(states: torch.Tensor) -> list:
    return [round(v, 4) for v in states.pow(2).mean(dim=(1, 2, 3)).sqrt().tolist()]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--reference-dir', type=pathlib.Path, required=True, help='checkout of github.com/Bycarkos/ODE-ViT')
    p.add_argument('--variants', nargs='+', default=['ours_spectral_head', 'reference'],
                   choices=list(VARIANTS))
    p.add_argument('--seeds', nargs='+', type=int, default=[0, 1])
    p.add_argument('--threads', type=int, default=1, help='torch CPU threads (the issue measured with 1)')
    add_recipe_args(p, train_per_class=1000, device=True)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    reference = load_reference(args.reference_dir)

    # the forwards agree when the weights agree (checked once, at init, on random images)
    torch.manual_seed(0)
    ours, ref = build('ours', False, reference).eval(), build('reference', False, reference).eval()
    copy_into_reference(ours, ref)
    x = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        max_logit_diff = (ours(x) - ref(x)).abs().max().item()
    print(f'forward parity with copied weights: max |logit difference| = {max_logit_diff:.2e}', flush=True)

    train, test = load_split(args.data, 'train', args.train_per_class), load_split(args.data, 'test', args.test_per_class)
    probe_x = train[0][::len(train[0]) // 8][:8]
    where = f'{args.threads} CPU thread(s) per run' if args.device == 'cpu' else args.device
    budget = subset_budget(args) + f'; {where}'
    out = RESULTS / 'odevit_parity.json'

    def earlier_rows() -> dict:  # re-read before every write: parallel invocations share the file
        previous = read_result(out) if out.exists() else {}
        return {(r['variant'], r['seed']): r for r in previous.get('rows', [])} \
            if previous.get('budget') == budget else {}

    rows = earlier_rows()
    for name in args.variants:
        impl, final_norm, head_init = VARIANTS[name]
        for seed in args.seeds:
            torch.manual_seed(seed)
            model = build(impl, final_norm, reference, head_init)
            row = {'variant': name, 'implementation': impl, 'final_norm': final_norm, 'head_init': head_init, 'seed': seed,
                   'params_M': round(sum(q.numel() for q in model.parameters()) / 1e6, 4)}
            task = classification_task(model.to(args.device))
            row['train_s'] = round(fit(task, model.parameters(), train, args, seed, args.epochs,
                                       log=lambda m, name=name, seed=seed: print(f'{name} seed {seed}: {m}', flush=True)))
            row['test_top1'] = accuracy(model, test)
            with torch.no_grad():
                x = probe_x.to(args.device)
                rms = state_rms(model.states(x) if impl == 'reference' else trajectory(model, x))
            row['state_rms'] = rms
            row['state_growth'] = round(rms[-1] / rms[0], 2)
            rows = {**earlier_rows(), (name, seed): row}
            print(name, row, flush=True)
            path = write_result('odevit_parity', {
                'benchmark': 'odevit_parity', 'budget': budget, 'steps': STEPS, 'model_args': MODEL_ARGS,
                'reference_file': str(REFERENCE_FILE), 'max_logit_diff_copied_weights': max_logit_diff,
                'rows': sorted(rows.values(), key=lambda r: (list(VARIANTS).index(r['variant']), r['seed']))})
    print('| variant | seed | test top-1 | state RMS t=0 -> t=1 |\n|---|---|---|---|')
    for r in sorted(rows.values(), key=lambda r: (list(VARIANTS).index(r['variant']), r['seed'])):
        print(f'| {r["variant"]} | {r["seed"]} | {r["test_top1"]:.2f} | {r["state_rms"][0]} -> {r["state_rms"][-1]} |')
    print(f'wrote {path}')


if __name__ == '__main__':
    main()
