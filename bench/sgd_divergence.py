"""What explodes first when ODE-ViT meets timm's default optimizer (issue 25, item 4).

train.py's defaults are SGD with Nesterov momentum 0.9, lr = 0.1 x batch / 256, weight decay 2e-5
(not on biases / norms / tokens), label smoothing 0.1, no gradient clipping; with ``--warmup-epochs 0``
the first update already runs at that lr. This script repeats exactly that optimizer on an in-memory
CIFAR-10 subset (flip + 4-px crop) and logs, after every update:

* the loss and the lr;
* per parameter: gradient norm, update norm ||dW||, weight norm ||W||, and for matrices the spectral
  norm sigma_max (the fused attention in-projection split into its q, k and v blocks);
* on a fixed probe batch (eval mode): the state RMS at every grid point along t, the largest
  attention logit |q.k|/sqrt(d_h) of the field at X(0) and X(1), and the logits' std / max.

``--variants`` runs ODE-ViT with the reference code's initialisation (``reference_init``), as registered
(``default``) and candidate changes, all with the same data, data order and seed; ``--models`` adds the
comparison models (bViT, odeified ViT, a discrete timm ViT, the authors' ``ViTNeuralODE`` with
``--reference-dir``) under the identical optimizer. ``--sharpness N`` measures, before training, the
largest Hessian eigenvalue of the loss (per parameter group) on N images, next to the largest sharpness
at which train.py's optimiser is stable on a quadratic (:func:`sgd_stable_below`: Nesterov momentum 0.9,
1.36 / lr; heavy-ball momentum would allow 3.8 / lr). For every run the summary names the first update at which each logged
quantity left its starting range and, at the first update where the final state grew 10x in one
update, which single parameter's update was responsible (the state at t = 1 recomputed with that one
parameter restored to its previous value). Runs accumulate in the JSON across invocations (key: model,
variant, batch, lr, clipping, seed).

    ../.venv/bin/python sgd_divergence.py --variants reference_init default --sharpness 32
    ../.venv/bin/python sgd_divergence.py --batch 128 --updates 60
    ../.venv/bin/python sgd_divergence.py --models bvit_tiny_cifar vit_odeified vit_discrete
    ../.venv/bin/python sgd_divergence.py --models reference --reference-dir /path/to/ODE-ViT
"""
import argparse
import math
import pathlib
import time

import timm
import torch
from timm.loss import LabelSmoothingCrossEntropy
from timm.optim import create_optimizer_v2

import timm_odevit  # noqa: F401
from timm_odevit.analysis import trajectory
from _data import DEFAULT_ROOT, augment, load_split
from _util import RESULTS, read_result, write_result
from odevit_parity import load_reference

DISCRETE = dict(model_name='vit_tiny_patch16_224', img_size=32, patch_size=4, num_classes=10)  # 12 blocks, D 192


class Reference(torch.nn.Module):
    """The authors' ``ViTNeuralODE`` (checkout via --reference-dir) built as odevit_tiny_cifar, image -> logits."""

    def __init__(self, module, steps: int):
        super().__init__()
        self.net = module.ViTNeuralODE(
            img_size=32, patch_size=4, num_classes=10, embed_dim=256, num_heads=4, mlp_ratio=2., emulate_depth=12,
            time_interval=1.0, num_eval_steps=steps + 1, solver='euler', l2_attention=False, register_tokens=10,
            pos_embed_register_tokens=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)['logits']


def build(name: str, variant: str, steps: int, seed: int, reference=None) -> torch.nn.Module:
    torch.manual_seed(seed)
    if name == 'vit_discrete':
        return timm.create_model(DISCRETE['model_name'], **{k: v for k, v in DISCRETE.items() if k != 'model_name'})
    if name == 'vit_odeified':
        return timm.create_model('vit_odeified', base='vit_tiny_patch16_224', img_size=32, patch_size=4, num_classes=10,
                                 check_finite=False)
    if name == 'reference':
        if reference is None:
            raise SystemExit('--models reference needs --reference-dir (a checkout of github.com/Bycarkos/ODE-ViT)')
        return Reference(reference, steps)
    kwargs = dict(num_classes=10, check_finite=False)
    if name.startswith('odevit'):
        kwargs['steps'] = steps
        if 'reference_init' in variant.split('+'):
            kwargs['head_init'] = 'spectral'
    model = timm.create_model(name, **kwargs)
    apply_variant(model, variant)
    return model


@torch.no_grad()
def apply_variant(model: torch.nn.Module, variant: str) -> None:
    """ODE-ViT variants ('+'-joined): 'default' (as registered), 'reference_init' (the reference code's
    initialisation: classifier spectral-normed like every other linear, ``head_init='spectral'``), and candidate
    changes: 'head0' (zero classifier), 'out0' (zero attention / MLP output projections), 'sqrtdepth' (the depth
    scale s carried by the weights: value block of qkv and attention projection x sqrt(s), fc2 x s, field output
    not multiplied by s; same function, gradients of those weights s-fold smaller)."""
    for part in variant.split('+'):
        if part == 'head0':
            model.head.weight.zero_()
        elif part == 'out0':
            field = model.blocks.field
            field.attn.proj.weight.zero_()
            field.mlp.fc2.weight.zero_()
        elif part == 'sqrtdepth':
            field = model.blocks.field
            s, D = field.depth_scale, model.embed_dim
            field.attn.qkv.weight[2 * D:] *= s ** .5
            field.attn.proj.weight *= s ** .5
            field.mlp.fc2.weight *= s
            field.depth_scale = 1.0
        elif part not in ('default', 'reference_init', '-'):
            raise SystemExit(f'unknown variant part {part!r}')


def sgd_stable_below(lr: float, momentum: float = 0.9, nesterov: bool = True) -> float:
    """The largest curvature lambda at which SGD with momentum b converges on f = lambda x^2 / 2: the roots of
    z^2 - (1 + b)(1 - a) z + b (1 - a) (Nesterov, a = lr lambda; torch's SGD, which timm's 'sgd' builds with
    nesterov=True) lie in the unit circle iff a < 2 (1 + b) / (1 + 2 b), i.e. 1.36 / lr at b = 0.9; heavy-ball
    momentum (z^2 - (1 + b - a) z + b) allows a < 2 (1 + b), 3.8 / lr. A heuristic for a network: it reads the
    sharpness at one point, and sharpness moves during training."""
    return 2 * (1 + momentum) / ((1 + 2 * momentum) if nesterov else 1) / lr


def sharpness(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, groups: dict, iters: int = 15) -> dict:
    """Largest eigenvalue of the training loss's Hessian (power iteration on Hessian-vector products) with respect
    to each group of parameters, at the current weights (compare with :func:`sgd_stable_below`)."""
    fused = [m for m in model.modules() if getattr(m, 'fused_attn', False)]
    for m in fused:  # double backward through the fused CPU attention kernel is not implemented
        m.fused_attn = False
    criterion = LabelSmoothingCrossEntropy(0.1)
    named = dict(model.named_parameters())
    model.train()
    out = {}
    try:
        for group, match in groups.items():
            params = [p for n, p in named.items() if match(n)]
            if not params:
                continue
            grads = torch.autograd.grad(criterion(model(x), y), params, create_graph=True)
            v = [torch.randn_like(p, generator=None) for p in params]
            lam = 0.
            for _ in range(iters):
                norm = torch.sqrt(sum((u * u).sum() for u in v))
                v = [u / norm for u in v]
                hv = torch.autograd.grad(grads, params, v, retain_graph=True)
                lam = sum((a * b).sum() for a, b in zip(hv, v)).item()
                v = [h.detach() for h in hv]
            out[group] = round(lam, 1)
    finally:
        for m in fused:
            m.fused_attn = True
    return out


SHARPNESS_GROUPS = {  # ours / timm's names, and the reference's (net.odefunc.*, net.head.*)
    'all': lambda n: True,
    'depth (field / blocks)': lambda n: n.startswith(('blocks.', 'net.odefunc.')),
    'attention in-projection': lambda n: n.startswith(('blocks.', 'net.odefunc.')) and ('qkv' in n or 'in_proj' in n),
    'head': lambda n: n.startswith(('head', 'net.head')),
}


def matrices(model: torch.nn.Module) -> dict:
    """name -> 2-D weight (conv kernels flattened; a fused qkv split into q, k, v)."""
    out = {}
    for name, p in model.named_parameters():
        if p.ndim < 2 or name in ('cls_token', 'reg_token', 'pos_embed'):
            continue
        w = p.detach().flatten(1)
        if name.endswith(('qkv.weight', 'in_proj_weight')):  # ours / the reference's nn.MultiheadAttention
            for part, block in zip('qkv', w.chunk(3, 0)):
                out[name.replace('qkv.weight', f'{part}.weight').replace('in_proj_weight', f'{part}_proj_weight')] = block
        else:
            out[name] = w
    return out


def spectral_norms(model: torch.nn.Module) -> dict:
    return {k: torch.linalg.matrix_norm(w.float(), ord=2).item() if bool(torch.isfinite(w).all()) else float('nan')
            for k, w in matrices(model).items()}


@torch.no_grad()
def probe_states(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """(P + 1, B, N, D) states along depth: grid points of a continuous-depth model, block outputs of a ViT."""
    model.eval()
    if isinstance(model, Reference):
        return model.net(x, output_hidden_states=True)['states']
    if hasattr(model.blocks, 'field'):
        return trajectory(model, x)
    z = model.norm_pre(model._pos_embed(model.patch_embed(x)))
    states = [z]
    for blk in model.blocks:
        states.append(blk(states[-1]))
    return torch.stack(states)


@torch.no_grad()
def max_attention_logit(model: torch.nn.Module, z: torch.Tensor) -> float:
    """Largest |q.k| / sqrt(d_h) of the (first) attention at state z."""
    if isinstance(model, Reference):
        block = model.net.odefunc.block
        z = block.norm_attn(z)
        B, N, D = z.shape
        H = block.attn.mha.num_heads
        q, k, _ = (z @ block.attn.mha.in_proj_weight.T).reshape(B, N, 3, H, D // H).permute(2, 0, 3, 1, 4)
        return ((q @ k.transpose(-2, -1)) * (D // H) ** -0.5).abs().max().item()
    if hasattr(model.blocks, 'field') and hasattr(model.blocks.field, 'norm_attn'):
        attn, z = model.blocks.field.attn, model.blocks.field.norm_attn(z)
    else:
        block = model.blocks.field.block if hasattr(model.blocks, 'field') else model.blocks[0]
        attn, z = block.attn, block.norm1(z)
    B, N, D = z.shape
    q, k, _ = attn.qkv(z).reshape(B, N, 3, attn.num_heads, D // attn.num_heads).permute(2, 0, 3, 1, 4)
    return ((q @ k.transpose(-2, -1)) * (D // attn.num_heads) ** -0.5).abs().max().item()


def finite(v: float) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def rounded(d: dict, digits: int = 4) -> dict:
    return {k: (float(f'{v:.{digits}g}') if finite(v) else str(v)) for k, v in d.items()}


@torch.no_grad()
def blame(model, before: dict, probe: torch.Tensor, rms_now: float) -> dict:
    """rms of X(1) on the probe with ONE parameter restored to its pre-update value, for each parameter."""
    out = {}
    for name, p in model.named_parameters():
        saved = p.detach().clone()
        p.copy_(before[name])
        out[name] = probe_states(model, probe)[-1].pow(2).mean().sqrt().item()
        p.copy_(saved)
    return dict(sorted(rounded(out).items(), key=lambda kv: kv[1] if finite(kv[1]) else float('inf')))


def run(name: str, variant: str, args, data, reference=None) -> dict:
    x, y = data
    model = build(name, variant, args.steps, args.seed, reference)
    lr = args.lr if args.lr is not None else 0.1 * args.batch / 256
    opt = create_optimizer_v2(model, 'sgd', lr=lr, momentum=0.9, weight_decay=2e-5)  # train.py's defaults
    criterion = LabelSmoothingCrossEntropy(0.1)
    gen = torch.Generator().manual_seed(args.seed)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(1234))
    probe = x[order[:args.probe]]
    sharp = None
    if args.sharpness:
        torch.manual_seed(args.seed)
        sharp = sharpness(model, x[order[:args.sharpness]], y[order[:args.sharpness]], SHARPNESS_GROUPS)
        print(f'{name}/{variant} sharpness at init (SGD stable below {sgd_stable_below(lr):.0f}): {sharp}', flush=True)
    log, blamed = [], None
    rms0 = None
    t0 = time.time()
    for step in range(args.updates):
        idx = torch.randint(0, len(x), (args.batch,), generator=gen)
        model.train()
        loss = criterion(model(augment(x[idx], gen)), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if args.clip_grad:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad)
        grad = {n: p.grad.norm().item() for n, p in model.named_parameters() if p.grad is not None}
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        opt.step()
        params = dict(model.named_parameters())
        update = {n: (params[n].detach() - before[n]).norm().item() for n in before}
        states = probe_states(model, probe)
        rms = states.pow(2).mean(dim=(1, 2, 3)).sqrt()
        with torch.no_grad():
            logits = model(probe)
        row = {
            'update': step + 1, 'loss': loss.item(), 'lr': lr,
            'grad_norm': rounded(grad), 'update_norm': rounded(update),
            'weight_norm': rounded({n: p.detach().norm().item() for n, p in params.items()}),
            'spectral_norm': rounded(spectral_norms(model)),
            'state_rms': [float(f'{v:.4g}') if math.isfinite(v) else str(v) for v in rms.tolist()],
            'attn_logit_max': {'t0': max_attention_logit(model, states[0]), 't1': max_attention_logit(model, states[-1])},
            'logits_std': logits.std().item(), 'logits_absmax': logits.abs().max().item(),
        }
        if rms0 is None:  # the state before any update: recompute from the weights before it
            with torch.no_grad():
                saved = {n: p.detach().clone() for n, p in params.items()}
                for n, p in params.items():
                    p.copy_(before[n])
                init_states = probe_states(model, probe)
                init_spectral = spectral_norms(model)
                init_logits = model(probe)
                for n, p in params.items():
                    p.copy_(saved[n])
            rms0 = init_states.pow(2).mean(dim=(1, 2, 3)).sqrt()
            log.append({'update': 0, 'state_rms': [float(f'{v:.4g}') for v in rms0.tolist()],
                        'spectral_norm': rounded(init_spectral), 'logits_std': init_logits.std().item()})
        prev_final = float(log[-1]['state_rms'][-1]) if finite(log[-1]['state_rms'][-1]) else float('nan')
        final = rms[-1].item()
        if blamed is None and math.isfinite(prev_final) and (not math.isfinite(final) or final > 10 * prev_final):
            blamed = {'update': step + 1, 'rms_t1_before': prev_final, 'rms_t1_after': final,
                      'rms_t1_with_one_parameter_restored': blame(model, before, probe, final)}
        log.append(row)
        print(f'{name}/{variant} update {step + 1}: loss {row["loss"]:.4g} rms(t=1) {final:.4g} '
              f'max sigma {max(row["spectral_norm"].items(), key=lambda kv: kv[1] if finite(kv[1]) else float("inf"))} '
              f'attn logit(t=1) {row["attn_logit_max"]["t1"]:.3g} logits std {row["logits_std"]:.3g}', flush=True)
        if not math.isfinite(loss.item()):
            break
    return {'model': name, 'variant': variant, 'lr': lr, 'batch': args.batch, 'seed': args.seed,
            'clip_grad': args.clip_grad, 'sharpness_at_init': sharp, 'sgd_stable_below': round(sgd_stable_below(lr), 1),
            'steps': args.steps if name.startswith('odevit') or name == 'reference' else None, 'seconds': round(time.time() - t0, 1),
            'diverged_at_update': next((r['update'] for r in log[1:] if not finite(r['loss'])), None),
            'summary': summarize(log), 'blame': blamed, 'log': log}


def summarize(log: list) -> dict:
    """First update at which each quantity left its starting range (x10 for the state / logits,
    x2 for a spectral norm), and the values at the last finite update."""
    init = log[0]
    out = {}
    first = lambda cond: next((r['update'] for r in log[1:] if cond(r)), None)  # noqa: E731
    out['first_update_state_rms_t1_x10'] = first(
        lambda r: not finite(r['state_rms'][-1]) or r['state_rms'][-1] > 10 * init['state_rms'][-1])
    out['first_update_logits_std_x10'] = first(
        lambda r: not finite(r['logits_std']) or r['logits_std'] > 10 * init['logits_std'])
    out['first_update_loss_nonfinite'] = first(lambda r: not finite(r['loss']))
    out['first_update_spectral_x2'] = {k: first(lambda r, k=k: not finite(r['spectral_norm'][k])
                                                or r['spectral_norm'][k] > 2 * v)
                                       for k, v in init['spectral_norm'].items()}
    out['first_update_spectral_x2'] = {k: v for k, v in out['first_update_spectral_x2'].items() if v is not None}
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--data', default=str(DEFAULT_ROOT))
    p.add_argument('--train-per-class', type=int, default=100)
    p.add_argument('--models', nargs='+', default=['odevit_tiny_cifar'])
    p.add_argument('--variants', nargs='+', default=['reference_init', 'default'],
                   help="ODE-ViT only, '+'-joined parts: default, reference_init, head0, out0, sqrtdepth")
    p.add_argument('--clip-grad', type=float, default=None, help='gradient-norm clipping (train.py: off)')
    p.add_argument('--sharpness', type=int, default=0, metavar='N',
                   help='also measure the loss sharpness at init on N training images (0: off)')
    p.add_argument('--reference-dir', type=pathlib.Path, default=None,
                   help='checkout of github.com/Bycarkos/ODE-ViT, for --models reference (not part of this project)')
    p.add_argument('--steps', type=int, default=12, help='Euler steps of ODE-ViT (the registered default)')
    p.add_argument('--batch', type=int, default=32)
    p.add_argument('--lr', type=float, default=None, help='default: train.py rule 0.1 x batch / 256')
    p.add_argument('--updates', type=int, default=30)
    p.add_argument('--probe', type=int, default=32)
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--threads', type=int, default=1)
    p.add_argument('--out', default='sgd_divergence')
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    data = load_split(args.data, 'train', args.train_per_class)
    reference = load_reference(args.reference_dir) if args.reference_dir else None
    runs = []
    for name in args.models:
        for variant in (args.variants if name.startswith('odevit') else ['-']):
            runs.append(run(name, variant, args, data, reference))
    print('| model | variant | diverged at update | state RMS t=1 x10 at | first sigma x2 | culprit (restoring it) |')
    print('|---|---|---|---|---|---|')
    for r in runs:
        s = r['summary']
        sig = min(s['first_update_spectral_x2'].items(), key=lambda kv: kv[1], default=(None, None))
        culprit = next(iter(r['blame']['rms_t1_with_one_parameter_restored'].items())) if r['blame'] else None
        print(f'| {r["model"]} | {r["variant"]} | {r["diverged_at_update"]} | {s["first_update_state_rms_t1_x10"]} '
              f'| {sig} | {culprit} |')
    out = RESULTS / f'{args.out}.json'
    key = lambda r: (r['model'], r['variant'], r['batch'], r['lr'], r.get('clip_grad'), r['seed'])  # noqa: E731
    earlier = read_result(out).get('runs', []) if out.exists() else []
    merged = {key(r): r for r in earlier}
    merged.update({key(r): r for r in runs})
    path = write_result(args.out, {
        'benchmark': 'sgd_divergence', 'recipe': (
            'timm train.py defaults at peak lr from update 1: SGD nesterov momentum 0.9, lr 0.1 x batch/256 (unless '
            'the run says otherwise), wd 2e-5 (none on 1-d params / tokens), label smoothing 0.1, no clipping unless '
            f'clip_grad; {10 * args.train_per_class} CIFAR-10 train images (first per class), flip + 4px crop, '
            '1 CPU thread'), 'runs': list(merged.values())})
    print(f'wrote {path}')


if __name__ == '__main__':
    main()
