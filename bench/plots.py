"""PNG plots from the JSON in bench/results (no training; run after the benchmarks).

    python bench/plots.py
"""

from _util import RESULTS, read_result, save_figure


def _figure(ncols: int = 1, figsize=(6, 4)):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    return plt.subplots(1, ncols, figsize=figsize)


def _save(fig, ax, name):
    ax.grid(alpha=.3)
    fig.tight_layout()
    return save_figure(fig, RESULTS / name, dpi=120)


def accuracy_vs_params(result):
    """One point per model: the mean test top-1 over its seeds (``name@seedN`` keys), bars = min..max."""
    fig, ax = _figure()
    models = {}
    for name, r in result['runs'].items():
        models.setdefault(name.rsplit('@seed', 1)[0], []).append(r)
    for name, runs in models.items():
        r, top1 = runs[0], [x['test_top1'] for x in runs]
        mean = sum(top1) / len(top1)
        ax.errorbar(r['params_M'], mean, yerr=[[mean - min(top1)], [max(top1) - mean]],
                    marker='o' if r['family'] == 'discrete' else 's', ms=7, capsize=3)
        ax.annotate(f'{name}\n{len(top1)} seed(s)', (r['params_M'], mean), fontsize=7,
                    xytext=(4, 4), textcoords='offset points')
    ax.set_xscale('log')
    ax.set(xlabel='parameters (M, log)', ylabel='CIFAR-10 test top-1 (%), mean over seeds')
    ax.set_title('same recipe and epochs (CPU-sized budget); bars: seed range', fontsize=9)
    return _save(fig, ax, 'accuracy_vs_params.png')


def inference_grid(result):
    """One colour per trained model, one line style and marker per solver."""
    fig, ax = _figure()
    styles = {'euler': ('o', '-'), 'midpoint': ('s', '--'), 'rk4': ('^', ':')}
    runs = {name: r for name, r in result['runs'].items() if r.get('inference_grid_sweep')}
    trained = set()
    for i, (name, r) in enumerate(runs.items()):
        rows = r['inference_grid_sweep']['test_top1']
        for method in dict.fromkeys(row['method'] for row in rows):
            marker, ls = styles.get(method, ('x', '-.'))
            pts = [row for row in rows if row['method'] == method]
            ax.plot([row['block_evals'] for row in pts], [row['top1'] for row in pts], marker=marker, ls=ls,
                    color=f'C{i}', label=f'{name} {method}')
        trained.add(r['kwargs'].get('steps'))
    for steps in sorted(trained):
        ax.axvline(steps, color='grey', ls=':', label=f'trained: euler {steps} steps')
    ax.set_xscale('log', base=2)
    ax.set(xlabel='field evaluations at inference (log2)', ylabel='test top-1 (%)')
    fig.set_size_inches(9, 4)
    ax.legend(fontsize=7, loc='upper left', bbox_to_anchor=(1.01, 1))
    return _save(fig, ax, 'inference_grid.png')


def memory_vs_steps(result):
    fig, ax = _figure()
    rows = result['rows']
    for mode in ('direct', 'grad_checkpointing', 'adjoint'):
        ax.plot([r['steps'] for r in rows], [r[mode] for r in rows], 'o-', label=mode)
    ax.set(xlabel='Euler steps', ylabel='peak training memory (MiB)')
    ax.set_title(f'{result["model"]}, batch {result["batch"]}', fontsize=9)
    ax.legend()
    return _save(fig, ax, 'memory_vs_steps.png')


def deep_supervision_horizon(result):
    fig, ax = _figure()
    runs = result['runs']
    for name, color in zip(dict.fromkeys(k.split('@')[0] for k in runs), ('C0', 'C1', 'C2', 'C3')):
        for key, split, style in (('accuracy_vs_iterations', 'test', '-'), ('holdout_accuracy_vs_iterations', 'held out', '--')):
            curves = [r[key] for k, r in runs.items() if k.split('@')[0] == name and key in r]
            if curves:  # the mean over seeds at every iteration
                ax.plot([c['point'] for c in curves[0]], [sum(c[i]['top1'] for c in curves) / len(curves)
                                                          for i in range(len(curves[0]))],
                        style, color=color, label=f'{name}, {split} (mean of {len(curves)})')
    ax.axvline(result['trained_iterations'], color='grey', ls=':', label='training horizon T')
    ax.set(xlabel='inference iterations', ylabel='top-1 (%)')
    ax.set_title(result['model'], fontsize=9)
    ax.legend()
    return _save(fig, ax, 'deep_supervision_horizon.png')


def odevit_stability(result):
    fig, (ax_rms, ax_ent) = _figure(ncols=2, figsize=(9, 3.6))
    for r in result['rows']:
        if 'final' not in r:
            continue
        label = f'{r["variant"]} ({r["test_top1"]:.1f} %)'
        ax_rms.plot(range(len(r['final']['state_rms'])), r['final']['state_rms'], 'o-', label=label)
        ax_ent.plot(range(len(r['final']['attn_entropy'])), r['final']['attn_entropy'], 'o-', label=label)
    ax_rms.set(yscale='log', xlabel='grid point k (state X(t_k))', ylabel='state RMS (log)')
    ax_ent.set(xlabel='grid point k', ylabel='attention entropy (nats)')
    ax_rms.legend(fontsize=8)
    ax_ent.set_title('after training; ' + result['probe'].split(';')[1].strip(), fontsize=8)
    ax_rms.grid(alpha=.3)
    return _save(fig, ax_ent, 'odevit_stability.png')


PLOTS = {
    'accuracy_vs_params': (accuracy_vs_params, inference_grid),
    'memory_vs_steps': (memory_vs_steps,),
    'deep_supervision_horizon': (deep_supervision_horizon,),
    'odevit_stability': (odevit_stability,),
}


def main():
    for name, fns in PLOTS.items():
        path = RESULTS / f'{name}.json'
        if not path.exists():
            print(f'skip {name}: no {path.name}')
            continue
        for fn in fns:
            print('wrote', fn(read_result(path)))


if __name__ == '__main__':
    main()
