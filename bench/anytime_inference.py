"""Anytime inference of one checkpoint: top-1 against mean NFE and against wall time, fixed grids
next to early exit (timm_odevit.anytime).

Fixed grids: the checkpoint integrated with ``--method`` at each of ``--grids`` steps (iterations for a
recurrent bViT), measured with ``accuracy_at_budgets``. Early exit: on each of ``--exit-grids`` the head
reads the state after every interval and an image stops when its prediction has settled
(``Settled(patience=k)``: the argmax unchanged over k consecutive steps; ``Confident(threshold=p)``:
top softmax probability >= p; and ``Settled(k) | Confident(p)`` for each ``--combined k:p``); finished
images leave the batch. Every setting sees the same images (``--per-class`` of each class of the
CIFAR-10 test split, sorted file names, in memory); wall time is summed over the batches, the order of
the settings rotating from batch to batch so that drift hits all alike (one warm-up batch first, not
timed). For each early-exit setting the JSON also names the best fixed grid at no more than its mean
NFE (``best_grid_for_budget`` on the fixed grids measured here, on the same images). Writes
bench/results/anytime_inference.json and anytime_inference.png.

    python bench/anytime_inference.py [--per-class 1000] [--model odevit_tiny_cifar.c10] [--batch 250]
"""
import argparse
import pathlib
import time
from typing import Optional, Tuple

import timm
import torch
from matplotlib.figure import Figure

import timm_odevit  # noqa: F401
from timm_odevit.anytime import Confident, Settled, accuracy_at_budgets, best_grid_for_budget, early_exit
from _data import DEFAULT_ROOT, MEAN, STD, load_split
from _util import RESULTS, save_figure, write_result

REPO = pathlib.Path(__file__).resolve().parents[1]


def load_model(name: str) -> Tuple[torch.nn.Module, Optional[pathlib.Path]]:
    """The released weights and the file they came from: through timm's registered tag (packaged / HF cache,
    offline), else the release folder (``local-dir:release/<name>``)."""
    if name.startswith('local-dir:'):
        return timm.create_model(name, pretrained=True), pathlib.Path(name[len('local-dir:'):]) / 'model.safetensors'
    if name.startswith('hf-hub:'):
        return timm.create_model(name, pretrained=True), None
    try:
        model = timm.create_model(name, pretrained=True)
        return model, pathlib.Path(model.pretrained_cfg['file']) if model.pretrained_cfg.get('file') else None
    except Exception as e:  # no packaged file and no network: the release folder of this checkout
        folder = REPO / 'release' / name
        if not folder.is_dir():
            raise
        print(f'timm.create_model({name!r}, pretrained=True) failed ({type(e).__name__}); loading local-dir:{folder}')
        return timm.create_model(f'local-dir:{folder}', pretrained=True), folder / 'model.safetensors'


def weights_sha256(path: Optional[pathlib.Path]) -> Optional[str]:
    """sha256 of the safetensors file the weights came from (which release was measured); None when unknown."""
    import hashlib
    return hashlib.sha256(path.read_bytes()).hexdigest() if path is not None and path.is_file() else None


def rules(args):
    out = [(f'Settled(patience={k})', Settled(patience=k)) for k in args.patience]
    out += [(f'Confident(threshold={p:g})', Confident(threshold=p)) for p in args.thresholds]
    for pair in args.combined:
        k, p = pair.split(':')
        out.append((f'Settled(patience={int(k)}) | Confident(threshold={float(p):g})',
                    Settled(patience=int(k)) | Confident(threshold=float(p))))
    return out


def plot(result, path: pathlib.Path) -> pathlib.Path:
    fig = Figure(figsize=(11, 4.2))
    axes = fig.subplots(1, 2)
    fixed = result['fixed_grids']
    for ax, key, label in ((axes[0], 'nfe', 'mean field evaluations per image'),
                           (axes[1], 'ms_per_image', 'wall time per image (ms)')):
        ax.plot([r[key] for r in fixed], [r['top1'] for r in fixed], 'k-s', ms=4,
                label=f'fixed {result["method"]} grid')
        for r in fixed:
            ax.annotate(str(r['steps']), (r[key], r['top1']), fontsize=6, xytext=(2, -8), textcoords='offset points')
        for i, grid in enumerate(result['exit_grids']):
            rows = [r for r in result['early_exit'] if r['grid_steps'] == grid]
            for r in rows:
                kind = '*' if '|' in r['rule'] else ('o' if r['rule'].startswith('Settled') else '^')
                ax.plot(r[key], r['top1'], kind, color=f'C{i}', ms=6 if kind != '*' else 9,
                        label=f'early exit on {result["method"]} {grid}' if r is rows[0] else None)
                short = (r['rule'].replace('Settled(patience=', 'S').replace('Confident(threshold=', 'C')
                         .replace(')', ''))
                ax.annotate(short, (r[key], r['top1']), fontsize=6, color=f'C{i}', xytext=(3, 3),
                            textcoords='offset points')
        ax.set_xscale('log', base=2)
        ax.set(xlabel=f'{label} (log2)', ylabel='top-1 (%)')
        ax.grid(alpha=.3)
    axes[0].legend(fontsize=7, loc='lower right')
    fig.suptitle(f'{result["model"]}: {result["images"]} CIFAR-10 test images; o Settled (patience), '
                 '^ Confident (threshold), * either', fontsize=9)
    fig.tight_layout()
    return save_figure(fig, path, dpi=120)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--model', default='odevit_tiny_cifar.c10',
                   help='a pretrained timm name (default: the release), or local-dir:/hf-hub: (default %(default)s)')
    p.add_argument('--data', default=str(DEFAULT_ROOT), help='CIFAR-10 ImageFolder root with a test/ split')
    p.add_argument('--per-class', type=int, default=1000, help='test images per class (1000 = all 10,000)')
    p.add_argument('--batch', type=int, default=250)
    p.add_argument('--method', default='euler', help='solver of the fixed and early-exit grids (ODE models)')
    p.add_argument('--grids', type=int, nargs='+', default=[2, 3, 4, 6, 8, 12, 16, 24], help='fixed grids (steps)')
    p.add_argument('--exit-grids', type=int, nargs='+', default=[6, 12], help='grids early exit runs on (steps)')
    p.add_argument('--patience', type=int, nargs='*', default=[1, 2, 3])
    p.add_argument('--thresholds', type=float, nargs='*', default=[0.6, 0.8, 0.9, 0.95])
    p.add_argument('--combined', nargs='*', default=['2:0.9'], help='patience:threshold pairs, either rule stops')
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    p.add_argument('--threads', type=int, default=None, help='torch CPU threads (default: torch\'s)')
    p.add_argument('--out', default='anytime_inference', help='result name in bench/results (default %(default)s)')
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == 'cuda' else (lambda: None)

    model, weights_file = load_model(args.model)
    model = model.to(device).eval()
    cfg = model.pretrained_cfg
    if not (torch.allclose(torch.tensor(cfg['mean']), MEAN.flatten(), atol=1e-3)
            and torch.allclose(torch.tensor(cfg['std']), STD.flatten(), atol=1e-3)):
        raise SystemExit(f'{args.model} was trained with mean/std {cfg["mean"]}/{cfg["std"]}, not CIFAR-10\'s '
                         '(bench/_data.py): this benchmark reads CIFAR-10 only')
    recurrent = model.blocks.solver.unit == 'iteration'
    trained = model.blocks.solver
    x, y = load_split(args.data, 'test', args.per_class)
    batches = [(x[i:i + args.batch], y[i:i + args.batch]) for i in range(0, len(x), args.batch)]
    grids = [n if recurrent else (args.method, n) for n in args.grids]
    exit_rules = rules(args)
    print(f'{args.model} ({trained.describe()}), {len(x)} test images, batch {args.batch}, {args.device}, '
          f'{torch.get_num_threads()} threads', flush=True)

    def with_grid(steps):  # a recurrence's steps are its iterations (h = 1)
        model.blocks.solver = trained.replace(steps=steps, **({} if recurrent else {'method': args.method}))

    def exit_settings():
        return [(grid, name, rule) for grid in args.exit_grids for name, rule in exit_rules]

    # warm-up, untimed
    wx, wy = batches[0][0][:min(8, args.batch)].to(device), batches[0][1][:min(8, args.batch)].to(device)
    accuracy_at_budgets(model, [(wx, wy)], grids=grids)
    for grid, _, rule in exit_settings():
        with_grid(grid)
        early_exit(model, wx, rule=rule)
    model.blocks.solver = trained

    fixed = {}
    exits = {(g, n): {'correct': 0, 'nfe': 0, 'seconds': 0., 'steps': [0] * (g + 1)} for g, n, _ in exit_settings()}
    t_start = time.perf_counter()
    for b, (xb, yb) in enumerate(batches):
        xb, yb = xb.to(device), yb.to(device)
        units = [('fixed', None)] + [('exit', s) for s in exit_settings()]
        units = units[b % len(units):] + units[:b % len(units)]  # rotate the order every batch
        for kind, setting in units:
            if kind == 'fixed':
                rot = b % len(grids)
                for row in accuracy_at_budgets(model, [(xb, yb)], grids=grids[rot:] + grids[:rot], device=device):
                    acc = fixed.setdefault(row['grid'], {'correct': 0., 'nfe': 0., 'seconds': 0., 'images': 0,
                                                         'changes': row['changes']})
                    acc['correct'] += row['top1'] * row['images'] / 100
                    acc['nfe'] += row['nfe'] * row['images']
                    acc['seconds'] += row['seconds']
                    acc['images'] += row['images']
                continue
            grid, name, rule = setting
            with_grid(grid)
            sync()
            t0 = time.perf_counter()
            out = early_exit(model, xb, rule=rule)
            sync()
            acc = exits[(grid, name)]
            acc['seconds'] += time.perf_counter() - t0
            acc['correct'] += int((out.predictions == yb).sum())
            acc['nfe'] += int(out.nfe.sum())
            for s in out.steps.tolist():
                acc['steps'][s] += 1
            model.blocks.solver = trained
        print(f'  batch {b + 1}/{len(batches)} ({time.perf_counter() - t_start:.0f} s)', flush=True)
    n = len(x)
    fixed_rows = sorted(({'grid': g, 'steps': a['changes'].get('steps', a['changes'].get('iterations')),
                          'changes': a['changes'], 'nfe': a['nfe'] / a['images'],
                          'top1': 100. * a['correct'] / a['images'], 'seconds': a['seconds'],
                          'ms_per_image': 1e3 * a['seconds'] / a['images']} for g, a in fixed.items()),
                        key=lambda r: r['nfe'])
    exit_rows = []
    for (grid, name), a in exits.items():
        row = {'grid_steps': grid, 'rule': name, 'nfe': a['nfe'] / n, 'top1': 100. * a['correct'] / n,
               'seconds': a['seconds'], 'ms_per_image': 1e3 * a['seconds'] / n,
               'mean_steps': sum(s * c for s, c in enumerate(a['steps'])) / n,
               'images_stopping_at_step': a['steps'][1:]}
        try:
            best = best_grid_for_budget(fixed_rows, row['nfe'])
            row['best_fixed_grid_within_nfe'] = {'grid': best['grid'], 'nfe': best['nfe'], 'top1': best['top1']}
        except ValueError:
            row['best_fixed_grid_within_nfe'] = None
        exit_rows.append(row)

    print('\n| fixed grid | NFE | top-1 % | ms / image |\n|---|---|---|---|')
    for r in fixed_rows:
        print(f'| {r["grid"]} | {r["nfe"]:.0f} | {r["top1"]:.1f} | {r["ms_per_image"]:.2f} |')
    print('\n| early exit on | rule | mean NFE | top-1 % | ms / image | best fixed grid at <= NFE |')
    print('|---|---|---|---|---|---|')
    for r in exit_rows:
        best = r['best_fixed_grid_within_nfe']
        print(f'| {args.method if not recurrent else "recurrence"} {r["grid_steps"]} | {r["rule"]} | {r["nfe"]:.2f} | '
              f'{r["top1"]:.1f} | {r["ms_per_image"]:.2f} | '
              + (f'{best["grid"]}: {best["top1"]:.1f} % |' if best else '– |'))
    result = {
        'benchmark': 'anytime_inference', 'model': args.model, 'trained_solver': trained.describe(),
        'method': 'recurrence' if recurrent else args.method, 'images': n, 'split': 'CIFAR-10 test',
        'weights_sha256': weights_sha256(weights_file),
        'per_class': args.per_class, 'batch': args.batch, 'device': str(device),
        'exit_grids': args.exit_grids, 'fixed_grids': fixed_rows, 'early_exit': exit_rows,
        'wall_time': 'summed over the batches; settings interleaved per batch (order rotated), one warm-up batch',
        'total_seconds': time.perf_counter() - t_start,
    }
    path = write_result(args.out, result)
    print(f'wrote {path} and {plot(result, RESULTS / f"{args.out}.png")}')


if __name__ == '__main__':
    main()
