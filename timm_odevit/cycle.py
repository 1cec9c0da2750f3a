"""Training cycles of a release: warm restarts from the released weights, released only when held-out top-1 improves.

    odevit-cycle speed --config CYCLE.yaml --data-dir DATA [--out speed.json]     # train.py flags of this machine
    python -m timm_odevit.train --config CYCLE.yaml --initial-checkpoint release/TAG/model.safetensors $FLAGS ...
    odevit-cycle release RUN_DIR release/TAG --eval-dir CIFAR_ROOT --command "THE TRAIN COMMAND" [--speed ...]
    odevit-cycle init release/TAG (--measure-val DATA | --val-top1 X --val-images N)   # once: the cycle-0 record

``release`` takes the run's best held-out epoch by the metric train.py selected on (summary.csv's ``eval_top1``:
the EMA weights' when the run validated an EMA, then ``model_best.pth.tar`` holds that epoch) and compares it with
the release's recorded held-out top-1 (``record.json``). Only when it is higher by more than the noise (one binomial
standard error on the held-out images, or ``--min-gain``) does it export with :func:`timm_odevit.hub.export` (the
test split measured once, for the card), replace the release folder's files and the package's copy of the weights,
and extend the release's multi-cycle record: ``record.json`` (every cycle's command, speed setting, wall time,
held-out and test top-1), ``summary.csv`` with a ``cycle`` column, ``learning_curve.png`` across cycles and a
"Training cycles" section in the card.

``--select-grids N ...`` (an anytime cycle, e.g. one trained with ``train_depth``): the release's and the cycle's
weights are both measured on the run's held-out split at each of these depths; the cycle is released when their mean
top-1 over the depths beats the release's by more than one standard error of that mean's level, and at the model's own
grid it is no worse than the release's by more than the noise above (a checkpoint for every budget, not one bought
with the budget it serves).
"""
import argparse
import csv
import hashlib
import json
import math
import pathlib
import re
import shutil
import statistics
import sys
import tempfile
from typing import Any, Dict, List, Optional, Sequence

RECORD = 'record.json'
SUMMARY = 'summary.csv'
CURVE = 'learning_curve.png'
CYCLE0_CURVE = 'learning_curve_cycle0.png'  # a first release's own curve, kept when it has no per-epoch record


# ---- files --------------------------------------------------------------------------------------
def sha256(path) -> str:
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def read_rows(path) -> List[Dict[str, str]]:
    with open(path, newline='') as f:
        return list(csv.DictReader(f))


def write_rows(path, rows: List[Dict[str, Any]]) -> None:
    fields: List[str] = []
    for row in rows:
        fields += [k for k in row if k not in fields]
    with open(path, 'w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def read_record(release_dir) -> Dict[str, Any]:
    """The release's cycle record; ValueError when missing or when the weights changed without it."""
    release_dir = pathlib.Path(release_dir)
    path = release_dir / RECORD
    if not path.is_file():
        raise ValueError(f'{path} does not exist: record the release first (odevit-cycle init {release_dir} ...)')
    record = json.loads(path.read_text())
    if record.get('weights_sha256') != sha256(release_dir / 'model.safetensors'):
        raise ValueError(f'{path} describes other weights than {release_dir / "model.safetensors"} (sha256 differs): '
                         'the release was replaced without odevit-cycle; record it again (odevit-cycle init --force)')
    return record


def noise_floor(top1: float, images: int) -> float:
    """One binomial standard error (points) of a top-1 of ``top1`` % measured on ``images`` images."""
    p = top1 / 100
    return 100 * math.sqrt(p * (1 - p) / images)


# ---- the run ------------------------------------------------------------------------------------
def read_run(run_dir) -> Dict[str, Any]:
    """A finished train.py run: its args.yaml, summary.csv rows, train_time.json, and which weights it validated."""
    import yaml
    run_dir = pathlib.Path(run_dir)
    for name in ('args.yaml', SUMMARY, 'model_best.pth.tar'):
        if not (run_dir / name).is_file():
            raise ValueError(f'{run_dir} is not a finished train.py run: {name} is missing')
    args = yaml.safe_load((run_dir / 'args.yaml').read_text()) or {}
    rows = read_rows(run_dir / SUMMARY)
    if not rows or 'eval_top1' not in rows[0]:
        raise ValueError(f'{run_dir / SUMMARY} has no eval_top1 rows: the run did not validate on a held-out split')
    if args.get('eval_metric', 'top1') != 'top1':
        raise ValueError(f"the run selected on {args['eval_metric']!r}, not top1: its model_best is not comparable")
    timing = run_dir / 'train_time.json'
    return {'dir': run_dir, 'args': args, 'rows': rows,
            'train_time': json.loads(timing.read_text()) if timing.is_file() else {},
            # train.py validates the EMA after the raw weights and logs / selects by the EMA's metric
            'weights': 'ema' if args.get('model_ema') and not args.get('model_ema_force_cpu') else 'raw'}


def best_epoch(run: Dict[str, Any]) -> Dict[str, Any]:
    """The epoch model_best.pth.tar holds (summary.csv's highest eval_top1, the earlier on a tie), cross-checked
    against the checkpoint's own epoch and metric."""
    import argparse as _argparse
    import torch
    rows = run['rows']
    best = max(rows, key=lambda r: (float(r['eval_top1']), -int(r['epoch'])))
    path = run['dir'] / 'model_best.pth.tar'
    with torch.serialization.safe_globals([_argparse.Namespace]):  # tensors and train.py's args only
        ckpt = torch.load(path, map_location='cpu', weights_only=True)
    epoch, metric = ckpt.get('epoch'), ckpt.get('metric')
    if epoch != int(best['epoch']) or metric is None or abs(float(metric) - float(best['eval_top1'])) > 1e-6:
        raise ValueError(f'{path} holds epoch {epoch} (metric {metric}), but the best eval_top1 of {SUMMARY} is epoch '
                         f"{best['epoch']} ({best['eval_top1']}): the run folder is inconsistent")
    return {'epoch': int(best['epoch']), 'top1': float(best['eval_top1']), 'weights': run['weights'],
            'checkpoint': str(path)}


def speed_of(args: Dict[str, Any]) -> str:
    """The speed setting a run used, as named by :mod:`timm_odevit.speed` (from its args.yaml)."""
    amp = args.get('amp') and ('bf16' if args.get('amp_dtype') == 'bfloat16' else 'fp16')
    name = '+'.join(n for n in (amp, 'channels_last' if args.get('channels_last') else '') if n)
    return name or 'fp32'


def check_speed(args: Dict[str, Any], speed: Optional[str], speed_record: Optional[Dict]) -> Dict[str, Any]:
    """The speed entry of a cycle: the setting the run used (args.yaml), with the measurement that chose it; a
    stated setting (``--speed``, a name or train.py flags) or measurement that disagrees with the run is an error."""
    from . import speed as speed_mod
    used = speed_of(args)
    if speed is not None:
        stated = speed.strip()
        if stated.startswith('--') or stated == '':
            tokens = stated.split()  # the flags `odevit-cycle speed` printed, less the --epochs N of its --hours
            tokens = [t for i, t in enumerate(tokens) if not t.startswith('--epochs')
                      and not (i and tokens[i - 1] == '--epochs')]
            stated = next((k for k, v in speed_mod.SETTINGS.items() if sorted(v) == sorted(tokens)), stated)
        if stated != used:
            raise ValueError(f'--speed {speed!r} is not what the run used: its args.yaml says {used!r}')
    entry: Dict[str, Any] = {'setting': used}
    if speed_record is not None:
        if speed_record.get('choice') != used:
            raise ValueError(f"the speed measurement chose {speed_record.get('choice')!r} but the run used {used!r}")
        entry['measured'] = {k: speed_record.get(k) for k in ('results', 'hardware', 'cpu_features', 'batch_size',
                                                              'updates', 'tolerance')}
        if speed_record.get('epochs'):  # `--hours`: how the cycle's length was sized
            entry['measured']['epochs'] = speed_record['epochs']
    return entry


def check_start(run: Dict[str, Any], release_dir: pathlib.Path) -> None:
    """A cycle starts from the release it is compared with, and trains its architecture."""
    config = json.loads((release_dir / 'config.json').read_text())
    if run['args'].get('model') != config.get('architecture'):
        raise ValueError(f"the run trained {run['args'].get('model')!r}, the release is {config.get('architecture')!r}")
    start = run['args'].get('initial_checkpoint') or ''
    if pathlib.PurePath(start).name != 'model.safetensors' or pathlib.PurePath(start).parent.name != release_dir.name:
        raise ValueError(f"the run started from {repr(start) if start else 'scratch'}, not from "
                         f"{release_dir / 'model.safetensors'}: a cycle is a warm restart from the released weights "
                         '(--initial-checkpoint)')


# ---- the multi-cycle record ---------------------------------------------------------------------
def merged_summary(release_rows: List[Dict[str, str]], run_rows: List[Dict[str, str]], cycle: int,
                   first_cycle: int = 0) -> List[Dict[str, Any]]:
    """The release's summary.csv (rows without a cycle column are cycle ``first_cycle``) + the run's as ``cycle``."""
    rows = [{'cycle': r.get('cycle', first_cycle), **{k: v for k, v in r.items() if k != 'cycle'}}
            for r in release_rows]
    return rows + [{'cycle': cycle, **r} for r in run_rows]


def plot_cycles(rows: List[Dict[str, Any]], record: Dict[str, Any], out, title: str) -> None:
    """Validation top-1 per epoch across cycles (epochs counted from the first); a cycle without per-epoch rows
    shows as its selected epoch's held-out top-1 alone."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.5, 3.6), dpi=110)
    offset = 0
    for i, cycle in enumerate(record['cycles']):
        own = [r for r in rows if int(float(r['cycle'])) == cycle['cycle']]
        colour = f'C{i % 10}'
        if own:
            ax.plot([offset + int(float(r['epoch'])) + 1 for r in own], [float(r['eval_top1']) for r in own], 'o-',
                    color=colour, ms=4, label=f"cycle {cycle['cycle']}")
        else:
            ax.plot([offset + cycle['best_epoch'] + 1], [cycle['val_top1']], 's', color=colour,
                    label=f"cycle {cycle['cycle']} (final only: no per-epoch record)")
        if offset:
            ax.axvline(offset + .5, color='grey', lw=.8, ls=':')
        offset += cycle['epochs']
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel('epoch (all cycles)')
    ax.set_ylabel('held-out validation top-1 (%)')
    ax.grid(alpha=.3)
    ax.legend(fontsize=8, loc='lower right')
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def _hours(seconds) -> str:
    return '?' if seconds is None else f'{seconds / 3600:.1f} h'


def anytime_note(criterion: Dict[str, Any]) -> str:
    """The card's words for a cycle released on the anytime criterion."""
    depths = ', '.join(criterion['val_top1_at_depth'])
    return (f"released on the anytime criterion: mean held-out top-1 over depths {depths} "
            f"{criterion['mean_before']:.2f} → {criterion['mean']:.2f} (needed > +{criterion['required_mean_gain']:.2f}); "
            f"at its own grid {criterion['own_grid_gain']:+.2f} (allowed ≥ −{criterion['own_grid_allowed_loss']:.2f}); "
            f"{criterion['images']:,} held-out images.")


def card_section(record: Dict[str, Any], cycle0_curve: bool = False) -> str:
    """The card's "Training cycles" section (markdown) from the record."""
    lines = []
    for c in record['cycles']:
        before = c.get('test_top1_before')
        test = f"{'–' if before is None else f'{before:.2f}'} → {c['test_top1']:.2f}"
        command = c['command'].replace('|', '\\|').replace('\n', ' ')
        command = command if '`' in command else f'`{command}`'
        lines.append(f"| {c['cycle']} | {command} | {c['speed']['setting']} | {c['epochs']} | {_hours(c.get('seconds'))} "
                     f"| {c['val_top1']:.2f} ({'EMA' if c['weights'] == 'ema' else 'raw'}, epoch {c['best_epoch'] + 1} of "
                     f"{c['epochs']}) | {test} |")
    missing = [str(c['cycle']) for c in record['cycles'] if not c.get('per_epoch_record', True)]
    note = (f" Cycle {', '.join(missing)} left no per-epoch record (it was exported before summary.csv travelled with "
            'the weights)' + (f'; its own curve: [{CYCLE0_CURVE}]({CYCLE0_CURVE})' if cycle0_curve else '') + '.'
            if missing else '')
    timed = all(c.get('seconds') is not None for c in record['cycles'])
    notes = ''.join(f"\n- Cycle {c['cycle']}: {c['note']}" for c in record['cycles'] if c.get('note'))
    notes += ''.join(f"\n- Cycle {c['cycle']}: {anytime_note(c['criterion'])}" for c in record['cycles']
                     if c.get('criterion', {}).get('name') == 'anytime')
    return f'''
## Training cycles

Cycle 0 trained from scratch; every later cycle started from the weights released before it (a warm restart:
fresh optimizer, short warm-up, cosine to zero) and replaced them only when its best held-out validation top-1 (best
epoch of the cycle) beat theirs by more than one binomial standard error of that measurement (a criterion for
measurement noise on the held-out images, not the seed-to-seed spread of a recipe). The details above describe the
last cycle. [{RECORD}]({RECORD}) holds this table,
[{SUMMARY}]({SUMMARY}) every epoch of every cycle (column `cycle`; epochs restart at 0 in each cycle) and the
learning curve spans the cycles.{note} Total training time: {_hours(record['total_seconds'])}{'' if timed else ' (some cycles untimed)'}.

| cycle | command | speed setting | epochs | wall time | held-out top-1 (weights, epoch) | test top-1 before → after |
|---|---|---|---|---|---|---|
''' + '\n'.join(lines) + '\n' + (f'\nNotes:\n{notes}\n' if notes else '')


def with_section(card: str, section: str) -> str:
    """``card`` with its Training cycles section replaced by ``section`` (placed before the citation)."""
    card = re.sub(r'\n## Training cycles\n.*?(?=\n## |\Z)', '', card, flags=re.S)
    at = card.find('\n## Citation')
    return card + section if at < 0 else card[:at] + section + card[at:]


# ---- init ---------------------------------------------------------------------------------------
def _card_facts(card: str) -> Dict[str, Any]:
    """What an odevit-export card states about its training (None where it does not say); both card layouts
    (checkpoint row 'epoch 11, EMA weights' with train.py's 0-based index, or '..., epoch 12 of 12, EMA weights')."""
    def find(pattern, cast=str):
        m = re.search(pattern, card)
        return None if m is None else cast(next(g for g in m.groups() if g is not None))
    counted = re.search(r'\| checkpoint \|[^|\n]*?epoch (\d+) of \d+, (EMA|raw) weights', card)
    indexed = re.search(r'\| checkpoint \| epoch (\d+), (EMA|raw) weights', card)
    epoch = int(counted.group(1)) - 1 if counted else int(indexed.group(1)) if indexed else None
    weights = (counted or indexed).group(2).lower() if (counted or indexed) else None
    return {'test_top1': find(r'name: Top-1 accuracy\s+value: ([0-9.]+)|value: ([0-9.]+)\s+name: Top-1 accuracy', float),
            'test_top5': find(r'name: Top-5 accuracy\s+value: ([0-9.]+)|value: ([0-9.]+)\s+name: Top-5 accuracy', float),
            'test_images': find(r'\(([0-9,]+) test images', lambda s: int(s.replace(',', ''))),
            'epochs': find(r'\| epochs \| (\d+) \|', int), 'epoch': epoch, 'weights': weights,
            'hours': find(r'\| training wall time \| ([0-9.]+) h', float),
            'hardware': find(r'\| training hardware \| (.+?) \|'),
            'command': find(r'\nTraining: (.+)\n')}


def init_record(release_dir, val_top1: Optional[float] = None, val_images: Optional[int] = None,
                measure_val: Optional[str] = None, val_split: str = 'val', speed: str = 'fp32',
                command: Optional[str] = None, seconds: Optional[float] = None, force: bool = False,
                note: str = '') -> Dict[str, Any]:
    """Write the release's ``record.json`` as cycle 0: its held-out top-1 (measured on ``measure_val``'s
    ``val_split`` with the release's weights, or given), and what its card states (test top-1, epochs, selected
    epoch and weights, wall time, command); a summary.csv in the folder is cycle 0's per-epoch record."""
    release_dir = pathlib.Path(release_dir)
    if (release_dir / RECORD).exists() and not force:
        raise ValueError(f'{release_dir / RECORD} exists (force=True / --force records the release again)')
    if (val_top1 is None) == (measure_val is None):
        raise ValueError('give the held-out top-1 either measured (measure_val: the data root) or as val_top1 '
                         '(with val_images), not both')
    facts = _card_facts((release_dir / 'README.md').read_text())
    missing = [k for k in ('test_top1', 'test_images', 'epochs', 'epoch', 'weights') if facts[k] is None]
    if missing:
        raise ValueError(f'{release_dir / "README.md"} does not state {missing}: not an odevit-export card')
    if measure_val is not None:
        import timm
        from .hub import evaluate
        metrics = evaluate(timm.create_model(f'local-dir:{release_dir}', pretrained=True), measure_val, val_split)
        val_top1, val_images, source = metrics['top1'], metrics['images'], f'measured on {measure_val}/{val_split}'
    else:
        if not val_images or val_images < 1:
            raise ValueError('val_top1 needs val_images (how many held-out images it was measured on)')
        source = 'stated'
    if not 0 <= val_top1 <= 100:
        raise ValueError(f'val_top1 is a percentage, got {val_top1}')
    seconds = seconds if seconds is not None else (facts['hours'] * 3600 if facts['hours'] is not None else None)
    cycle0 = {'cycle': 0, 'command': command or facts['command'] or '?', 'speed': {'setting': speed},
              'seconds': seconds, 'hardware': facts['hardware'], 'epochs': facts['epochs'],
              'best_epoch': facts['epoch'], 'weights': facts['weights'], 'val_top1': round(val_top1, 4),
              'test_top1_before': None, 'test_top1': facts['test_top1'],
              'per_epoch_record': (release_dir / SUMMARY).is_file(), 'note': note}
    record = {'tag': release_dir.name, 'weights_sha256': sha256(release_dir / 'model.safetensors'),
              'selection': {'split': val_split, 'images': val_images, 'top1': round(val_top1, 4),
                            'weights': facts['weights'], 'source': source},
              'test': {'top1': facts['test_top1'], 'top5': facts['test_top5'], 'images': facts['test_images']},
              'cycles': [cycle0], 'total_seconds': seconds}
    (release_dir / RECORD).write_text(json.dumps(record, indent=1) + '\n')
    return record


# ---- release ------------------------------------------------------------------------------------
def held_out_at_depths(release_dir, best: Dict[str, Any], run: Dict[str, Any], grids: Sequence[int]) -> Dict[str, Any]:
    """Held-out top-1 (%) at each depth of ``grids`` of the release's weights and of the cycle's best epoch, on the
    run's own validation split (its args.yaml ``data_dir`` / ``val_split``): {'before', 'after': {depth: top1},
    'images'}."""
    import timm
    from .hub import _check_grids, evaluate_grids, image_folder, model_from_checkpoint
    _check_grids(grids)
    data_dir, split = run['args'].get('data_dir'), run['args'].get('val_split') or 'validation'
    if not data_dir or not (pathlib.Path(data_dir) / split).is_dir():
        raise ValueError(f"select_grids measures the run's held-out split, but {data_dir!r}/{split} (args.yaml "
                         "data_dir / val_split) is not a folder here: run the decision where the cycle's data is")
    release = timm.create_model(f'local-dir:{pathlib.Path(release_dir).resolve()}', pretrained=True)
    candidate, _ = model_from_checkpoint(best['checkpoint'], use_ema=best['weights'] == 'ema')
    out = {'images': len(image_folder(data_dir, split)[1]), 'split': f'{data_dir}/{split}'}
    for key, model in (('before', release), ('after', candidate)):
        out[key] = {str(r['depth']): round(r['top1'], 4) for r in evaluate_grids(model, data_dir, split, list(grids))}
    return out


def release_cycle(run_dir, release_dir, command: str, eval_dir: Optional[str] = None, eval_split: str = 'test',
                  speed: Optional[str] = None, speed_record: Optional[Dict] = None,
                  min_gain: Optional[float] = None, dry_run: bool = False, repo_id: Optional[str] = None,
                  package_weights=None, grids: Optional[Sequence[int]] = None,
                  select_grids: Optional[Sequence[int]] = None) -> Dict[str, Any]:
    """Decide on a finished cycle and, when its held-out top-1 beats the release's beyond the noise, release it
    (see the module docstring). ``package_weights``: the package's copy of the weights, updated with the
    release. ``grids``: the depths whose test top-1 the card and the record give (default: hub.DEFAULT_GRIDS;
    ``()`` for none). ``select_grids``: decide on the mean held-out top-1 over these depths instead (the module
    docstring). Returns the decision (and the test metrics when released)."""
    release_dir = pathlib.Path(release_dir)
    if not command or not command.strip():
        raise ValueError('command: the exact command line the cycle ran, for the record')
    record = read_record(release_dir)
    run = read_run(run_dir)
    check_start(run, release_dir)
    best = best_epoch(run)
    speed_entry = check_speed(run['args'], speed, speed_record)
    before = record['selection']
    floor = noise_floor(before['top1'], before['images']) if min_gain is None else float(min_gain)
    if floor < 0:
        raise ValueError(f'min_gain is a number of points >= 0, got {min_gain}')
    gain = best['top1'] - before['top1']
    decision = {'release': release_dir.name, 'run': str(run['dir']), 'epoch': best['epoch'],
                'weights': best['weights'], 'val_top1': best['top1'], 'val_top1_before': before['top1'],
                'gain': round(gain, 4), 'required_gain': round(floor, 4), 'improved': gain > floor,
                'speed': speed_entry['setting'], 'released': False}
    criterion = None
    if select_grids:
        measured = held_out_at_depths(release_dir, best, run, select_grids)
        mean_before, mean_after = (statistics.fmean(measured[k].values()) for k in ('before', 'after'))
        mean_floor = noise_floor(mean_before, measured['images'])
        criterion = {'name': 'anytime', 'split': measured['split'], 'images': measured['images'],
                     'val_top1_at_depth_before': measured['before'], 'val_top1_at_depth': measured['after'],
                     'mean_before': round(mean_before, 4), 'mean': round(mean_after, 4),
                     'mean_gain': round(mean_after - mean_before, 4), 'required_mean_gain': round(mean_floor, 4),
                     'own_grid_gain': round(gain, 4), 'own_grid_allowed_loss': round(floor, 4)}
        decision.update(criterion=criterion, improved=mean_after - mean_before > mean_floor and gain > -floor)
    if not decision['improved'] or dry_run:
        return decision
    if not eval_dir:
        raise ValueError('eval_dir: the data root whose test split the card measures')
    cycle = record['cycles'][-1]['cycle'] + 1
    staging = pathlib.Path(tempfile.mkdtemp(dir=release_dir.parent, prefix=f'.{release_dir.name}.cycle-'))
    try:
        from .hub import DEFAULT_GRIDS, export, verify_folder
        folder = staging / release_dir.name
        metrics = export(best['checkpoint'], str(folder), use_ema=best['weights'] == 'ema', eval_dir=eval_dir,
                         eval_split=eval_split, repo_id=repo_id or _registered_repo_id(release_dir.name),
                         train_command=command, grids=DEFAULT_GRIDS if grids is None else (list(grids) or None))
        old_rows = read_rows(release_dir / SUMMARY) if (release_dir / SUMMARY).is_file() else []
        rows = merged_summary(old_rows, run['rows'], cycle, first_cycle=record['cycles'][0]['cycle'])
        write_rows(folder / SUMMARY, rows)
        seconds = run['train_time'].get('seconds')
        record['cycles'].append({
            'cycle': cycle, 'command': command.strip(), 'speed': speed_entry, 'seconds': seconds,
            'hardware': run['train_time'].get('hardware'), 'epochs': len(run['rows']), 'best_epoch': best['epoch'],
            'weights': best['weights'], 'val_top1': round(best['top1'], 4), 'val_top1_before': before['top1'],
            'test_top1_before': record['test']['top1'], 'test_top1': round(metrics['top1'], 2),
            'per_epoch_record': True, 'started_from_sha256': record['weights_sha256'],
            **({'criterion': criterion} if criterion else {}),
            **({'test_top1_at_depth': {str(g['depth']): round(g['top1'], 2) for g in metrics['grids']}}
               if metrics.get('grids') else {})})
        known = [c['seconds'] for c in record['cycles'] if c.get('seconds') is not None]
        record['total_seconds'] = round(sum(known), 1) if known else None
        record['selection'] = dict(before, top1=round(best['top1'], 4), weights=best['weights'],
                                   source=f"train.py's eval_top1 of {run['dir'].name}, epoch {best['epoch']}")
        record['test'] = {'top1': round(metrics['top1'], 2), 'top5': round(metrics['top5'], 2),
                          'images': metrics['images']}
        record['weights_sha256'] = sha256(folder / 'model.safetensors')
        (folder / RECORD).write_text(json.dumps(record, indent=1) + '\n')
        keep_cycle0 = (len(record['cycles']) == 2 and not record['cycles'][0].get('per_epoch_record', True)
                       and ((release_dir / CURVE).is_file() or (release_dir / CYCLE0_CURVE).is_file()))
        if keep_cycle0 and not (release_dir / CYCLE0_CURVE).is_file():
            shutil.copy(release_dir / CURVE, folder / CYCLE0_CURVE)
        if (folder / CURVE).is_file():  # export drew one (matplotlib installed): draw the curve across cycles
            plot_cycles(rows, record, folder / CURVE, f'{release_dir.name}: validation top-1 across training cycles')
        card = folder / 'README.md'
        card.write_text(with_section(card.read_text(), card_section(record, cycle0_curve=keep_cycle0)))
        verify_folder(folder)
        for f in sorted(folder.iterdir()):
            shutil.move(str(f), str(release_dir / f.name))  # same file system: a rename per file
        if package_weights is not None:
            shutil.copy(release_dir / 'model.safetensors', package_weights)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    decision.update(released=True, cycle=cycle, test_top1=metrics['top1'], test_top5=metrics['top5'],
                    test_top1_before=record['cycles'][-1]['test_top1_before'])
    return decision


def _registered_repo_id(tag: str) -> Optional[str]:
    import timm
    import timm_odevit  # noqa: F401
    try:
        return timm.models.get_pretrained_cfg(tag).hf_hub_id
    except Exception:  # not a registered tag
        return None


# ---- command line -------------------------------------------------------------------------------
def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog='odevit-cycle', description=__doc__.split('\n\n')[0])
    sub = p.add_subparsers(dest='step', required=True)
    s = sub.add_parser('speed', add_help=False, help="the speed setting of this machine (timm_odevit.speed's options)")
    s = sub.add_parser('release', help='decide on a finished cycle; release it when it improved')
    s.add_argument('run_dir', help="the cycle's train.py output folder (summary.csv, model_best.pth.tar, args.yaml)")
    s.add_argument('release_dir', help='release/<tag> (with record.json)')
    s.add_argument('--command', required=True, help='the exact command line the cycle ran')
    s.add_argument('--eval-dir', help='data root whose test split the card measures (e.g. ../shared/data/cifar10)')
    s.add_argument('--eval-split', default='test')
    s.add_argument('--speed', default=None, help='the speed setting the run used (a name or the train.py flags)')
    s.add_argument('--speed-record', default=None, help='the JSON of `odevit-cycle speed --out` that chose it')
    s.add_argument('--min-gain', type=float, default=None,
                   help='points of held-out top-1 to beat (default: one binomial standard error of the release)')
    s.add_argument('--repo-id', default=None, help='Hub id for the card (default: the registered tag\'s)')
    s.add_argument('--no-package-weights', action='store_true',
                   help="leave the package's copy (timm_odevit/weights/<tag>) alone")
    s.add_argument('--dry-run', action='store_true', help='decide only: no export, no test split, nothing written')
    s.add_argument('--select-grids', type=int, nargs='+', default=None, metavar='N',
                   help='decide on the mean held-out top-1 over these depths (an anytime cycle), measured for the '
                        "release and the cycle on the run's validation split; the own grid may not lose beyond noise")
    s.add_argument('--grids', type=int, nargs='*', default=None, metavar='N',
                   help='depths (Euler steps / iterations) whose test top-1 the card gives (default: 2 3 4 6 8 12 16 24; '
                        'none: --grids with no value)')
    i = sub.add_parser('init', help="record a release as cycle 0 (record.json)")
    i.add_argument('release_dir')
    i.add_argument('--measure-val', default=None, help='data root: measure the held-out top-1 of the weights')
    i.add_argument('--val-split', default='val')
    i.add_argument('--val-top1', type=float, default=None)
    i.add_argument('--val-images', type=int, default=None)
    i.add_argument('--speed', default='fp32')
    i.add_argument('--command', default=None, help="cycle 0's command (default: the card's Training line)")
    i.add_argument('--seconds', type=float, default=None, help="cycle 0's wall time (default: the card's, rounded)")
    i.add_argument('--note', default='')
    i.add_argument('--force', action='store_true')
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ['speed']:
        from .speed import main as speed_main
        return speed_main(argv[1:])
    args = p.parse_args(argv)
    try:
        if args.step == 'init':
            out = init_record(args.release_dir, args.val_top1, args.val_images, args.measure_val, args.val_split,
                              args.speed, args.command, args.seconds, args.force, args.note)
        else:
            speed_record = json.loads(pathlib.Path(args.speed_record).read_text()) if args.speed_record else None
            package = None
            if not args.no_package_weights and not args.dry_run:
                from .models._common import packaged_weights
                candidate = packaged_weights(pathlib.Path(args.release_dir).name)
                package = candidate if candidate.is_file() else None
            out = release_cycle(args.run_dir, args.release_dir, args.command, args.eval_dir, args.eval_split,
                                args.speed, speed_record, args.min_gain, args.dry_run, args.repo_id, package,
                                args.grids, args.select_grids)
    except (ValueError, OSError) as e:
        raise SystemExit(f'error: {e}')
    print(json.dumps(out, indent=1))


if __name__ == '__main__':
    main()
