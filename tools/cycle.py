"""Training cycles of a release: warm restarts from the released weights, released only when held-out top-1 improves.

Run from the repository root (the release tooling is not installed with the package):

    python -m tools.speed --config CYCLE.yaml --data-dir DATA [--hours H] --out speed.json   # train.py flags here
    python -m tools.train --config CYCLE.yaml --initial-checkpoint release/TAG/model.safetensors $FLAGS ...
    python -m tools.cycle release RUN_DIR release/TAG --eval-dir CIFAR_ROOT --command "THE TRAIN COMMAND" \\
        [--speed-record speed.json]
    python -m tools.cycle init release/TAG RUN_DIR --eval-dir CIFAR_ROOT --command "ITS TRAIN COMMAND"  # once: cycle 0

``release`` takes the run's best held-out epoch by the metric train.py selected on (summary.csv's ``eval_top1``:
the EMA weights' when the run validated an EMA, then ``model_best.pth.tar`` holds that epoch) and compares it with
the release's recorded held-out top-1 (``record.json``), measured on the same split (name and image count, as timm's
reader finds them in the run's ``data_dir``). Only when it is higher by more than the noise, allowing for the pick of
the best of k epochs (:func:`selection_margin`: √(2 ln k), at least 1, binomial standard errors on the held-out images;
or ``--min-gain``) does it export with :func:`timm_odevit.hub.export` (the test split
measured once, for the card) into a staging folder, extend the multi-cycle record there (``record.json``: every
cycle's command, speed setting, wall time, held-out and test top-1 with their image counts; ``summary.csv`` with a
``cycle`` column, ``learning_curve.png`` across cycles and a "Training cycles" section in the card) and swap the
release folder and the package's copy of the weights whole (:mod:`tools.atomic`). ``read_record`` refuses a record
that contradicts itself, its summary.csv, its card or its weights.

A refused cycle (not a dry run) is appended to ``release/<tag>.refused.json`` (beside the folder; :func:`refused_log`)
with its decision, command, machine, wall time and commit: it leaves its numbers, as a released one does in the record.

``--select-grids N ...`` (an anytime cycle, e.g. one trained with ``train_depth``): the release's and the cycle's
weights are both measured on the run's held-out split at each of these depths; the cycle is released when their mean
top-1 over the depths beats the release's by more than √(2 ln k) standard errors of that mean's level (the epoch was
picked among k on the same images), and at the model's own grid it is no worse than the release's by more than one
standard error (a checkpoint for every budget, not one bought with the budget it serves).
"""
import argparse
import csv
import hashlib
import importlib.util
import io
import json
import math
import pathlib
import statistics
import uuid
from typing import Any, Dict, List, Optional, Sequence

from timm_odevit._checks import read_json

from .atomic import recover, swap_folder, write_atomic
from .card_extras import extend_card, with_depths, with_extras

RECORD = 'record.json'
HISTORY = 'HISTORY.md'
SUMMARY = 'summary.csv'
CURVE = 'learning_curve.png'
CYCLE0_CURVE = 'learning_curve_cycle0.png'  # a first release's own curve, kept when it has no per-epoch record
PREDICTIONS = 'test_predictions.json'  # the class the weights give each test image: checks re-measure any subset


# ---- files --------------------------------------------------------------------------------------
def sha256(path) -> str:
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def read_rows(path) -> List[Dict[str, str]]:
    with open(path, newline='') as f:
        return list(csv.DictReader(f))


def rows_text(rows: List[Dict[str, Any]]) -> str:
    fields: List[str] = []
    for row in rows:
        fields += [k for k in row if k not in fields]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator='\n')
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def test_predictions(folder, eval_dir: str, split: str = 'test', top1: Optional[float] = None) -> Dict[str, Any]:
    """The class the folder's weights predict for each image of ``eval_dir/split``, in timm's reader order, written to
    the folder's ``test_predictions.json``: a check can re-run any subset of the images and must get the same classes,
    and the card's top-1 follows from them and the labels. ``top1``: the export's measurement, which they must give."""
    import timm
    import torch
    from timm_odevit.loader import batches, eval_loader
    folder = pathlib.Path(folder)
    model = timm.create_model(f'local-dir:{folder.resolve()}', pretrained=True).eval()
    classes, loader = eval_loader(model, eval_dir, split)
    predicted, correct = [], 0
    with torch.no_grad():
        for x, y in batches(loader):
            p = model(x).argmax(-1)
            predicted += p.tolist()
            correct += int((p == y).sum())
    if top1 is not None and abs(100 * correct / len(predicted) - top1) > 1e-6:
        raise ValueError(f'the predictions of {folder} score {100 * correct / len(predicted)} %, the export measured '
                         f'{top1} %: the evaluation is not deterministic')
    out = {'split': split, 'images': len(predicted), 'classes': classes, 'predicted': predicted}
    write_atomic(folder / PREDICTIONS, json.dumps(out) + '\n')
    return out


def card_top1(folder: pathlib.Path) -> float:
    """The test top-1 of a model card's model-index (huggingface_hub's reading of the front matter)."""
    from huggingface_hub import ModelCard
    results = ModelCard.load(folder / 'README.md').data.eval_results or []
    top1 = [r.metric_value for r in results if r.metric_name == 'Top-1 accuracy']
    if not top1:
        raise ValueError(f'{folder / "README.md"} states no Top-1 accuracy in its model-index: not an export card')
    return float(top1[0])


def read_record(release_dir) -> Dict[str, Any]:
    """The release's cycle record; ValueError naming the file when it is missing, unreadable or contradicts itself,
    its summary.csv, its card or its weights (:func:`check_record`)."""
    release_dir = pathlib.Path(release_dir)
    path = release_dir / RECORD
    if not path.is_file():
        raise ValueError(f'{path} does not exist: record the release first (python -m tools.cycle init ...)')
    record = read_json(path)
    try:
        failed = check_record(release_dir, record)
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as e:
        failed = [f'{type(e).__name__}: {e}']
    if failed:
        raise ValueError(f'{path} is not a record of this release ({"; ".join(failed)}): record it again '
                         '(python -m tools.cycle init --force)')
    return record


def check_record(release_dir: pathlib.Path, record: Dict[str, Any]) -> List[str]:
    """What in ``record`` contradicts the folder or itself: its weights (sha256), card (test top-1), summary.csv
    (each released cycle's epochs, best epoch and held-out top-1), and its own numbers (selection and test are the last
    cycle's, each cycle starts from the one before, the total time is the sum)."""
    cycles, selection, test = record['cycles'], record['selection'], record['test']
    last, checks = cycles[-1], []
    checks.append((record['weights_sha256'] == sha256(release_dir / 'model.safetensors'),
                   f'it describes other weights than {release_dir / "model.safetensors"} (sha256 differs)'))
    checks.append(((selection['top1'], test['top1'], selection['images'], test['images']) ==
                   (last['val_top1'], last['test_top1'], last.get('val_images', selection['images']),
                    last.get('test_images', test['images'])), "its selection / test are not the last cycle's"))
    checks.append((isinstance(selection['images'], int) and selection['images'] >= 1 and 0 <= selection['top1'] <= 100,
                   f"selection {selection} is not a top-1 measured on images"))
    checks.append((abs(card_top1(release_dir) - test['top1']) < 0.005, f"the card's test top-1 is not {test['top1']}"))
    known = [c['seconds'] for c in cycles if c.get('seconds') is not None]
    checks.append(((record['total_seconds'] is None) == (not known) and abs((record['total_seconds'] or 0) - sum(known))
                   < 0.1, 'total_seconds is not the sum of the cycles'))
    for prev, c in zip(cycles, cycles[1:]):
        checks.append((c['val_top1_before'] == prev['val_top1'] and c['test_top1_before'] == prev['test_top1'],
                       f"cycle {c['cycle']} does not start from cycle {prev['cycle']}'s numbers"))
    rows = read_rows(release_dir / SUMMARY) if (release_dir / SUMMARY).is_file() else []
    for c in cycles:  # every released cycle, and a cycle 0 recorded from its run: train.py's best eval_top1
        own = [r for r in rows if int(float(r.get('cycle') or cycles[0]['cycle'])) == c['cycle']]
        if own and (c['cycle'] > cycles[0]['cycle'] or 'val_images' in c):
            best = max(own, key=lambda r: (float(r['eval_top1']), -int(r['epoch'])))
            checks.append(((len(own), int(best['epoch']), round(float(best['eval_top1']), 4)) ==
                           (c['epochs'], c['best_epoch'], c['val_top1']),
                           f"cycle {c['cycle']}'s epochs, best epoch or val_top1 are not its rows' in {SUMMARY}"))
    return [message for ok, message in checks if not ok]


def noise_floor(top1: float, images: int) -> float:
    """One binomial standard error (points) of a top-1 of ``top1`` % measured on ``images`` images."""
    p = top1 / 100
    return 100 * math.sqrt(p * (1 - p) / images)


def selection_margin(evaluations: int) -> float:
    """Standard errors by which the best of ``evaluations`` held-out scores of equally good weights exceeds their
    accuracy, about: the expected maximum of k standard normals, √(2 ln k), and at least 1 (one evaluation)."""
    return max(1.0, math.sqrt(2 * math.log(evaluations)))


# ---- the run ------------------------------------------------------------------------------------
def read_run(run_dir) -> Dict[str, Any]:
    """A finished train.py run: its args.yaml, summary.csv rows, train_time.json, and which weights it validated."""
    import yaml
    run_dir = pathlib.Path(run_dir)
    for name in ('args.yaml', SUMMARY, 'model_best.pth.tar'):
        if not (run_dir / name).is_file():
            raise ValueError(f'{run_dir} is not a finished train.py run: {name} is missing')
    if not (run_dir / 'train_time.json').is_file():
        raise ValueError(f'{run_dir} has no train_time.json (its wall time and machine, which the record needs): '
                         'train release cycles with python -m tools.train')
    try:
        args = yaml.safe_load((run_dir / 'args.yaml').read_text()) or {}
    except yaml.YAMLError as e:
        raise ValueError(f'{run_dir / "args.yaml"} is not readable YAML ({e})') from None
    rows = read_rows(run_dir / SUMMARY)
    try:
        [(int(r['epoch']), float(r['eval_top1'])) for r in rows]
    except (KeyError, TypeError, ValueError):
        rows = []
    if not rows:
        raise ValueError(f'{run_dir / SUMMARY} has no rows of epoch and eval_top1: the run did not validate on a '
                         'held-out split, or the file is damaged')
    if args.get('eval_metric', 'top1') != 'top1':
        raise ValueError(f"the run selected on {args['eval_metric']!r}, not top1: its model_best is not comparable")
    return {'dir': run_dir, 'args': args, 'rows': rows, 'train_time': read_json(run_dir / 'train_time.json'),
            # train.py validates the EMA after the raw weights and logs / selects by the EMA's metric
            'weights': 'ema' if args.get('model_ema') and not args.get('model_ema_force_cpu') else 'raw'}


def held_out(run: Dict[str, Any]) -> Dict[str, Any]:
    """The split the run validated on and its image count, as timm's reader finds them (the data must be here)."""
    from timm_odevit.data import image_folder
    data_dir, split = run['args'].get('data_dir'), run['args'].get('val_split') or 'validation'
    if not data_dir or not (pathlib.Path(data_dir) / split).is_dir():
        raise ValueError(f"the run validated on {data_dir!r}/{split} (args.yaml data_dir / val_split), which is not a "
                         "folder here: decide where the cycle's data is")
    return {'data_dir': data_dir, 'split': split, 'images': len(image_folder(data_dir, split)[1])}


def best_epoch(run: Dict[str, Any]) -> Dict[str, Any]:
    """The epoch model_best.pth.tar holds (summary.csv's highest eval_top1, the earlier on a tie), cross-checked
    against the checkpoint's own epoch and metric."""
    from timm_odevit.checkpoint import load_checkpoint_file
    rows = run['rows']
    best = max(rows, key=lambda r: (float(r['eval_top1']), -int(r['epoch'])))
    path = run['dir'] / 'model_best.pth.tar'
    ckpt = load_checkpoint_file(path)
    epoch, metric = ckpt.get('epoch'), ckpt.get('metric')
    if epoch != int(best['epoch']) or metric is None or abs(float(metric) - float(best['eval_top1'])) > 1e-6:
        raise ValueError(f'{path} holds epoch {epoch} (metric {metric}), but the best eval_top1 of {SUMMARY} is epoch '
                         f"{best['epoch']} ({best['eval_top1']}): the run folder is inconsistent")
    return {'epoch': int(best['epoch']), 'top1': float(best['eval_top1']), 'weights': run['weights'],
            'checkpoint': str(path)}


def prior_run(run: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """What a cycle 0 run started from (``--initial-checkpoint``): the train.py run whose checkpoint it names, with the
    epochs those weights trained in it, its wall time, machine and held-out top-1; the checkpoint alone when it is not
    in a run folder; None for a run from scratch."""
    start = run['args'].get('initial_checkpoint')
    if not start:
        return None
    try:
        before = read_run(pathlib.Path(start).parent)
    except ValueError:  # weights from elsewhere: what trained them is not on record
        return {'checkpoint': str(start)}
    best = best_epoch(before) if pathlib.Path(start).name == 'model_best.pth.tar' else None
    return {'checkpoint': str(start), 'epochs': best['epoch'] + 1 if best else len(before['rows']),
            'seconds': before['train_time'].get('seconds'), 'hardware': before['train_time'].get('hardware'),
            **({'val_top1': round(best['top1'], 4)} if best else {})}


def speed_of(args: Dict[str, Any]) -> str:
    """The speed setting a run used, as named by :mod:`tools.speed` (from its args.yaml)."""
    amp = args.get('amp') and ('bf16' if args.get('amp_dtype') == 'bfloat16' else 'fp16')
    name = '+'.join(n for n in (amp, 'channels_last' if args.get('channels_last') else '') if n)
    return name or 'fp32'


def check_speed(args: Dict[str, Any], speed: Optional[str], speed_record: Optional[Dict]) -> Dict[str, Any]:
    """The speed entry of a cycle: the setting the run used (args.yaml), with the measurement that chose it; a
    stated setting (``--speed``, a name or train.py flags) or measurement that disagrees with the run is an error."""
    from .speed import SETTINGS, teacher_of
    used = speed_of(args)
    if speed is not None:
        stated = speed.strip()
        if stated.startswith('--') or stated == '':
            tokens = stated.split()  # the flags `python -m tools.speed` printed, less the --epochs N of its --hours
            tokens = [t for i, t in enumerate(tokens) if not t.startswith('--epochs')
                      and not (i and tokens[i - 1] == '--epochs')]
            stated = next((k for k, v in SETTINGS.items() if sorted(v) == sorted(tokens)), stated)
        if stated != used:
            raise ValueError(f'--speed {speed!r} is not what the run used: its args.yaml says {used!r}')
    entry: Dict[str, Any] = {'setting': used}
    if speed_record is not None:
        if 'model' in speed_record:  # what one update costs depends on them (steps, train_depth)
            timed = (speed_record.get('model'), json.loads(json.dumps(
                {k: v for k, v in (speed_record.get('model_kwargs') or {}).items() if k != 'num_classes'})))
            ran = (args.get('model'), json.loads(json.dumps(args.get('model_kwargs') or {})))
            if timed != ran:
                raise ValueError(f'the speed measurement timed {timed[0]} with model kwargs {timed[1]} but the run '
                                 f'trained {ran[0]} with {ran[1]}: time the run\'s model with the run\'s '
                                 '--model-kwargs')
        if speed_record.get('choice') != used:
            raise ValueError(f"the speed measurement chose {speed_record.get('choice')!r} but the run used {used!r}")
        timed, ran = speed_record.get('teacher'), teacher_of(args)  # the teacher's work is part of every update
        if timed != ran:
            raise ValueError(f'the speed measurement timed the teacher {timed} but the run distilled from {ran}: '
                             "measure with a config that names the run's teacher and its flags (kd_*)")
        entry['measured'] = {k: speed_record.get(k) for k in ('results', 'hardware', 'cpu_features', 'batch_size',
                                                              'updates', 'tolerance', 'teacher')}
        if speed_record.get('epochs'):  # `--hours`: how the cycle's length was sized
            entry['measured']['epochs'] = speed_record['epochs']
    return entry


def check_start(run: Dict[str, Any], release_dir: pathlib.Path) -> None:
    """A cycle starts from the release it is compared with, and trains its architecture."""
    from timm_odevit._checks import read_config
    architecture = read_config(release_dir)['architecture']
    if run['args'].get('model') != architecture:
        raise ValueError(f"the run trained {run['args'].get('model')!r}, the release is {architecture!r}")
    start = run['args'].get('initial_checkpoint') or ''
    if pathlib.PurePath(start).name != 'model.safetensors' or pathlib.PurePath(start).parent.name != release_dir.name:
        raise ValueError(f"the run started from {repr(start) if start else 'scratch'}, not from "
                         f"{release_dir / 'model.safetensors'}: a cycle is a warm restart from the released weights "
                         '(--initial-checkpoint)')


def refused_log(release_dir) -> pathlib.Path:
    """Where the refused cycles of a release are kept: ``<tag>.refused.json`` beside the release folder (its
    ``record.json`` holds the released ones; the folder holds what was released, and is swapped whole)."""
    release_dir = pathlib.Path(release_dir)
    return release_dir.with_name(f'{release_dir.name}.refused.json')


def read_refusals(path) -> List[Dict[str, Any]]:
    """The refusals logged at ``path`` ([] when there is none yet); a damaged log is an error (nothing regenerates it),
    and a killed write's temporary file beside it is removed."""
    path = pathlib.Path(path)
    if not path.parent.is_dir():
        raise ValueError(f'the folder of the refused-cycle log {path} does not exist')
    for left in path.parent.glob(f'.{path.name}.*.tmp'):
        left.unlink(missing_ok=True)
    try:
        entries = json.loads(path.read_text()) if path.exists() else []
    except (OSError, UnicodeDecodeError, ValueError) as e:
        entries = f'{type(e).__name__}: {e}'
    if not isinstance(entries, list):
        raise ValueError(f'{path} is not a readable JSON list of refused cycles ({str(entries)[:200]}): nothing '
                         'regenerates it; restore it from git or move it aside')
    return entries


def log_refusal(path, decision: Dict[str, Any], command: str, run: Dict[str, Any], speed: Dict[str, Any]) -> None:
    """Append the refusal ``decision`` to the JSON list at ``path``, with the cycle's command, epochs, wall time,
    machine, the speed measurement that chose its setting (if given) and where it was recorded; written atomically
    (the log holds the earlier refusals, with the new one or without it). Cycles are decided one at a time: two
    decisions writing at once may keep only one."""
    path = pathlib.Path(path)
    entries = read_refusals(path)
    entries.append({**decision, 'command': command.strip(), 'recorded': recorded_now(), 'epochs': len(run['rows']),
                    'seconds': run['train_time'].get('seconds'), 'hardware': run['train_time'].get('hardware'),
                    **({'speed_measured': speed['measured']} if 'measured' in speed else {})})
    write_atomic(path, json.dumps(entries, indent=1) + '\n')


# ---- the multi-cycle record ---------------------------------------------------------------------
def merged_summary(release_rows: List[Dict[str, str]], run_rows: List[Dict[str, str]], cycle: int,
                   first_cycle: int = 0) -> List[Dict[str, Any]]:
    """The release's summary.csv (rows without a cycle column are cycle ``first_cycle``) + the run's as ``cycle``."""
    rows = [{'cycle': r.get('cycle', first_cycle), **{k: v for k, v in r.items() if k != 'cycle'}}
            for r in release_rows]
    return rows + [{'cycle': cycle, **r} for r in run_rows]


def checkout_commit(root: Optional[pathlib.Path] = None) -> str:
    """HEAD of the checkout at ``root`` (default: the tooling's), with '+dirty' when tracked files other than the
    release folders and the package's copies of their weights (which the tooling writes) differ from it, '+unknown'
    when git cannot tell; 'unknown' outside git."""
    import subprocess

    def git(*a) -> Optional[str]:
        try:
            done = subprocess.run(['git', '-C', str(root or pathlib.Path(__file__).resolve().parent), *a],
                                  capture_output=True, text=True)
        except OSError:
            return None
        return done.stdout.strip() if done.returncode == 0 else None
    head = git('rev-parse', 'HEAD')
    if not head:
        return 'unknown'
    dirty = git('status', '--porcelain', '--untracked-files=no', '--', ':/', ':(exclude,top)release',
                ':(exclude,top)timm_odevit/weights')
    return head + ('+unknown' if dirty is None else '+dirty' if dirty else '')


def recorded_now() -> Dict[str, str]:
    """Where and when the tooling records something: the checkout's commit and the UTC date."""
    import datetime
    return {'commit': checkout_commit(),
            'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}


def cycle_entry(number: int, command: str, run: Dict[str, Any], best: Dict[str, Any], held: Dict[str, Any],
                speed: Dict[str, Any], metrics: Dict[str, Any], **more) -> Dict[str, Any]:
    """A cycle of the record: what the run did and what was measured (held-out and test top-1, images, NFE), and
    where the tooling recorded it (the checkout's commit, the UTC date; the run's machine is ``hardware``)."""
    return {'cycle': number, 'command': command.strip(), 'recorded': recorded_now(), 'speed': speed,
            'seconds': run['train_time'].get('seconds'),
            'hardware': run['train_time'].get('hardware'), 'epochs': len(run['rows']), 'best_epoch': best['epoch'],
            'weights': best['weights'], 'val_top1': round(best['top1'], 4), 'val_split': held['split'],
            'val_images': held['images'], 'test_top1': round(metrics['top1'], 2), 'test_images': metrics['images'],
            'test_nfe_per_image': metrics.get('nfe'), 'per_epoch_record': True, **more}


def new_record(record: Dict[str, Any], folder: pathlib.Path, run: Dict[str, Any], best: Dict[str, Any],
               held: Dict[str, Any], metrics: Dict[str, Any]) -> Dict[str, Any]:
    """``record`` (with its new last cycle) completed for ``folder``: the selection and test of that cycle, the total
    time and the sha256 of the weights."""
    known = [c['seconds'] for c in record['cycles'] if c.get('seconds') is not None]
    return dict(record, weights_sha256=sha256(folder / 'model.safetensors'),
                selection={'split': held['split'], 'images': held['images'], 'top1': round(best['top1'], 4),
                           'weights': best['weights'],
                           'source': f"train.py's eval_top1 of {run['dir'].name}, epoch {best['epoch']}"},
                test={'top1': round(metrics['top1'], 2), 'top5': round(metrics['top5'], 2), 'images': metrics['images'],
                      'split': metrics['split'], 'nfe_per_image': metrics.get('nfe')},
                total_seconds=round(sum(known), 1) if known else None)


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


def _listed(items: Sequence[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return ' and '.join(filter(None, [', '.join(items[:-1]), items[-1]])) if items else ''


def gate_today(cycle: Dict[str, Any], images: int) -> Optional[Dict[str, float]]:
    """A released cycle's held-out gain and the gain today's gate needs for it (:func:`release_cycle`): √(2 ln k)
    standard errors for its best of k epochs, of the held-out top-1 or, for an anytime cycle, of the mean over depths
    (None for a cycle whose record lacks the numbers)."""
    crit = cycle.get('criterion')
    if not crit and 'val_top1_before' not in cycle:
        return None
    gain, level = ((crit['mean_gain'], crit['mean_before']) if crit else
                   (cycle['val_top1'] - cycle['val_top1_before'], cycle['val_top1_before']))
    images = crit['images'] if crit else cycle.get('val_images', images)
    return {'gain': gain, 'needed': noise_floor(level, images) * selection_margin(cycle['epochs']),
            'of': 'mean held-out gain over depths' if crit else 'held-out gain'} if images else None


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
        images = c.get('test_images') or record.get('test', {}).get('images')
        test = (f"{'–' if before is None else f'{before:.2f}'} → {c['test_top1']:.2f}"
                + (f" ± {1.96 * noise_floor(c['test_top1'], images):.2f}" if images else ''))
        command = c['command'].replace('|', '\\|').replace('\n', ' ')
        command = command if '`' in command else f'`{command}`'
        hours = f"≈ {_hours(c['seconds'])} ‡" if c.get('seconds_from') else _hours(c.get('seconds'))
        lines.append(f"| {c['cycle']} | {command} | {c['speed']['setting']} | {c['epochs']} | {hours} "
                     f"| {c['val_top1']:.2f} ({'EMA' if c['weights'] == 'ema' else 'raw'}, epoch {c['best_epoch'] + 1} of "
                     f"{c['epochs']}) | {test} |")
    missing = [str(c['cycle']) for c in record['cycles'] if not c.get('per_epoch_record', True)]
    note = (f" Cycle {', '.join(missing)} left no per-epoch record (it was exported before summary.csv travelled with "
            'the weights)' + (f'; its own curve: [{CYCLE0_CURVE}]({CYCLE0_CURVE})' if cycle0_curve else '') + '.'
            if missing else '')
    timed = all(c.get('seconds') is not None for c in record['cycles'])
    notes = ''.join(f"\n- Cycle {c['cycle']}: {c['note']}" for c in record['cycles'] if c.get('note'))
    on_anytime = [c for c in record['cycles'] if c.get('criterion', {}).get('name') == 'anytime']
    notes += ''.join(f"\n- Cycle {c['cycle']}: {anytime_note(c['criterion'])}" for c in on_anytime)
    decided = [str(c['cycle']) for c in on_anytime]
    listed = f"s {_listed(decided)} were" if len(decided) > 1 else f" {''.join(decided)} was"
    anytime = f' Cycle{listed} decided on the anytime criterion instead (the notes below the table).' if decided else ''
    later = record['cycles'][1:]
    gates = [(c['cycle'], gate_today(c, record.get('selection', {}).get('images'))) for c in later]
    short = [f"{n} ({g['of']} {g['gain']:+.2f}, needed > {g['needed']:.2f})" for n, g in gates if g and g['gain'] <= g['needed']]
    unchecked = [str(n) for n, g in gates if g is None]
    # no recorded gate: an anytime cycle (no allowance before 73b38c5) or a cycle the tooling did not stamp (`recorded`
    # came in de8cdf9; plain cycles had the allowance from 82ddcd6 on, and none of the committed ones fall between)
    one_se = [str(c['cycle']) for c in later if 'gate' not in c and ('criterion' in c or 'recorded' not in c)]
    today = ((f" Cycle{'s' if len(one_se) > 1 else ''} {_listed(one_se)} passed on one standard error, the gate of "
              f"{'their' if len(one_se) > 1 else 'its'} day." if one_se else '')
             + (f" Cycle{'s' if len(short) > 1 else ''} {_listed(short)} would not pass today's gate." if short else
                " Every later cycle also passes today's gate." if later and not unchecked else '')
             + (f" Cycle{'s' if len(unchecked) > 1 else ''} {_listed(unchecked)} cannot be checked against it (no "
                'held-out top-1 before the cycle in the record).' if unchecked else ''))
    selection = record.get('selection', {})
    floor = (f" (2·√(2p(1−p)/n) = {2 * math.sqrt(2) * noise_floor(selection['top1'], selection['images']):.2f} points at "
             f"the last held-out top-1, n = {selection['images']:,})" if {'top1', 'images'} <= selection.keys() else '')
    also = record.get('held_out_also_chose')
    reused = f" The same images also chose: {'; '.join(also)}." if also else ''
    first = record.get('first_chosen_on_test')
    reused += (" Chosen first on the test images this card's top-1 is measured on (each says whether held-out images "
               "re-checked it; docs/results.md \"Which images scored it\"): "
               f"{'; '.join(first)}." if first else '')
    prior = record['cycles'][0].get('started_from_run')
    start = (f"Cycle 0 was a warm restart of `{prior['checkpoint']}`" + (
        f" ({prior['epochs']} epochs, {_hours(prior['seconds'])} on {prior['hardware']}, before cycle 0 and not in the "
        'table or the total below)' if 'epochs' in prior else ' (what trained it is not on record)')
        if prior else 'Cycle 0 trained from scratch')
    guessed = [c for c in record['cycles'] if c.get('seconds_from')]
    unmeasured = ''.join(f"\n- ‡ Cycle {c['cycle']}'s wall time is not a measurement: {c['seconds_from']}; the total "
                         'includes it.' for c in guessed)
    return f'''
## Training cycles

{start}; every later cycle started from the weights released before it (a warm restart:
fresh optimizer, short warm-up, cosine to zero) and replaced them only when its best held-out validation top-1 (best
epoch of the cycle) beat theirs by the release gate of its day. Today's gate asks for √(2 ln k) binomial standard
errors (at least one) for the best of k epochs, an allowance for that pick; for k < 55 (√(2 ln k) < 2√2) it asks for
less than the docs' sampling floor for a difference of two independent scores{floor}, and neither is the seed-to-seed
spread of a recipe.{anytime}{today} The
same held-out images decided all {len(record['cycles']) - 1} later cycles.{reused} Test top-1 is given with its 95 % binomial interval. The details above
describe the last cycle. [{RECORD}]({RECORD}) holds this table,
[{SUMMARY}]({SUMMARY}) every epoch of every cycle (column `cycle`; epochs restart at 0 in each cycle) and the
learning curve spans the cycles.{note} Total training time: {_hours(record['total_seconds'])}{'' if timed else ' (some cycles untimed)'}.

| cycle | command | speed setting | epochs | wall time | held-out top-1 (weights, epoch) | test top-1 before → after (95 %) |
|---|---|---|---|---|---|---|
''' + '\n'.join(lines) + '\n' + (f'\nNotes:\n{notes}{unmeasured}\n' if notes or unmeasured else '')


def with_section(card: str, section: str) -> str:
    """An exported ``card`` with the Training cycles ``section`` placed before its citation."""
    at = card.find('\n## Citation')
    return card + section if at < 0 else card[:at] + section + card[at:]


def write_record(folder: pathlib.Path, record: Dict[str, Any]) -> None:
    """record.json into ``folder``, once it is consistent with the folder's weights, card and summary.csv."""
    failed = check_record(folder, record)
    if failed:
        raise ValueError(f'the record of {folder} would contradict it: {"; ".join(failed)}')
    write_atomic(folder / RECORD, json.dumps(record, indent=1) + '\n')


# ---- init ---------------------------------------------------------------------------------------
def card_depths(card: pathlib.Path, model, metrics: Dict[str, Any], run_args: Dict[str, Any], eval_dir: str,
                eval_split: str, grids: Sequence[int]) -> Dict[str, Any]:
    """Top-1 of ``model`` at the depths of ``grids`` on the card's test images: drawn on ``card`` (its "Accuracy at
    other depths" table; ``metrics['grids']`` holds the rows) and returned as the record's ``test_top1_at_depth``
    ({} without grids)."""
    from timm_odevit.evaluation import evaluate_grids
    if not grids:
        return {}
    metrics['grids'] = evaluate_grids(model, eval_dir, eval_split, list(grids))
    write_atomic(card, with_depths(card.read_text(), model, metrics, run_args))
    return {'test_top1_at_depth': {str(g['depth']): round(g['top1'], 2) for g in metrics['grids']}}


def init_record(release_dir, run_dir, command: str, eval_dir: str, eval_split: str = 'test', force: bool = False,
                note: str = '', grids: Sequence[int] = ()) -> Dict[str, Any]:
    """Write the release's ``record.json`` as cycle 0 from the train.py run it was exported from: the run's best
    held-out epoch (which the release's weights must be), its split and image count, wall time and speed setting, and
    the test split measured on the release's weights (the card must state the same top-1). ``grids``: the depths
    whose test top-1 the card and the record give, as a released cycle's (:func:`release_cycle`)."""
    import timm
    import torch
    from safetensors.torch import load_file
    from timm_odevit.evaluation import check_grids
    from timm_odevit.hub import evaluate, model_from_checkpoint
    release_dir = pathlib.Path(release_dir)
    grids = check_grids(grids) if len(grids) else []  # checked before anything is measured
    recover(release_dir)
    if (release_dir / RECORD).exists() and not force:
        raise ValueError(f'{release_dir / RECORD} exists (force=True / --force records the release again)')
    if not command or not command.strip():
        raise ValueError("command: the exact command line of cycle 0's run, for the record")
    run = read_run(run_dir)
    best, held = best_epoch(run), held_out(run)
    released = load_file(str(release_dir / 'model.safetensors'))
    selected = model_from_checkpoint(best['checkpoint'], use_ema=best['weights'] == 'ema')[0].state_dict()
    if released.keys() != selected.keys() or not all(torch.equal(released[k], selected[k]) for k in selected):
        raise ValueError(f"{release_dir / 'model.safetensors'} are not the {best['weights']} weights of epoch "
                         f"{best['epoch']} that {run['dir']} selected: export that run's selected weights")
    model = timm.create_model(f'local-dir:{release_dir.resolve()}', pretrained=True)
    metrics = evaluate(model, eval_dir, eval_split)
    if abs(card_top1(release_dir) - metrics['top1']) >= 0.005:
        raise ValueError(f"{release_dir / 'README.md'} states test top-1 {card_top1(release_dir)}, the weights measure "
                         f"{metrics['top1']:.2f} on {eval_dir}/{eval_split}: export the folder again")
    test_predictions(release_dir, eval_dir, eval_split, metrics['top1'])
    if '| GMACs |' not in (release_dir / 'README.md').read_text():  # as odevit-export wrote it: the release's extras
        extend_card(release_dir, run['dir'], run['args'], eval_split)
    depths = card_depths(release_dir / 'README.md', model, metrics, run['args'], eval_dir, eval_split, grids)
    prior = prior_run(run)
    cycle0 = cycle_entry(0, command, run, best, held, {'setting': speed_of(run['args'])}, metrics,
                         test_top1_before=None, per_epoch_record=(release_dir / SUMMARY).is_file(), note=note,
                         **depths, **({'started_from_run': prior} if prior else {}))
    record = new_record({'tag': release_dir.name, 'cycles': [cycle0]}, release_dir, run, best, held, metrics)
    write_record(release_dir, record)
    return record


# ---- release ------------------------------------------------------------------------------------
def held_out_at_depths(release_dir, best: Dict[str, Any], held: Dict[str, Any], grids: Sequence[int]) -> Dict[str, Any]:
    """Held-out top-1 (%) at each depth of ``grids`` of the release's weights and of the cycle's best epoch, on the
    run's own validation split (:func:`held_out`): {'before', 'after': {depth: top1}, 'images', 'split'}."""
    import timm
    from timm_odevit.checkpoint import model_from_checkpoint
    from timm_odevit.evaluation import evaluate_grids
    release = timm.create_model(f'local-dir:{pathlib.Path(release_dir).resolve()}', pretrained=True)
    candidate, _ = model_from_checkpoint(best['checkpoint'], use_ema=best['weights'] == 'ema')
    out = {'images': held['images'], 'split': f"{held['data_dir']}/{held['split']}"}
    for key, model in (('before', release), ('after', candidate)):
        rows = evaluate_grids(model, held['data_dir'], held['split'], list(grids))
        out[key] = {str(r['depth']): round(r['top1'], 4) for r in rows}
    return out


def release_cycle(run_dir, release_dir, command: str, eval_dir: Optional[str] = None, eval_split: str = 'test',
                  speed: Optional[str] = None, speed_record: Optional[Dict] = None,
                  min_gain: Optional[float] = None, dry_run: bool = False, repo_id: Optional[str] = None,
                  package_dir=None, grids: Optional[Sequence[int]] = None,
                  select_grids: Optional[Sequence[int]] = None, log=None) -> Dict[str, Any]:
    """Decide on a finished cycle and, when its held-out top-1 beats the release's beyond the noise, release it
    (see the module docstring). ``package_dir``: the package's copy of the weights and their config.json
    (``timm_odevit/weights/<tag>``), updated with the release. ``grids``: the depths whose test top-1 the card and
    the record give (measured on the exported folder, drawn by card_extras.with_depths; default:
    evaluation.DEFAULT_GRIDS; ``()`` for none). ``select_grids``: decide on the mean held-out top-1 over these depths instead (the module
    docstring). ``log``: the JSON list a refused decision is appended to (default: :func:`refused_log`; not
    on a dry run). Returns the decision (and the test metrics when released)."""
    from timm_odevit.evaluation import DEFAULT_GRIDS, check_grids
    release_dir = pathlib.Path(release_dir)
    package_dir = None if package_dir is None else pathlib.Path(package_dir)
    recover(release_dir, package_dir)
    if not command or not command.strip():
        raise ValueError('command: the exact command line the cycle ran, for the record')
    grids = DEFAULT_GRIDS if grids is None else grids
    grids = check_grids(grids) if len(grids) else []  # () for none; checked before anything is measured
    record = read_record(release_dir)
    run = read_run(run_dir)
    check_start(run, release_dir)
    best, held = best_epoch(run), held_out(run)
    before = record['selection']
    if (held['split'], held['images']) != (before['split'], before['images']):
        raise ValueError(f"the run validated on {held['images']} '{held['split']}' images, the release was selected on "
                         f"{before['images']} '{before['split']}' images: validate a cycle on the release's held-out "
                         'split')
    speed_entry = check_speed(run['args'], speed, speed_record)
    log = None if dry_run else pathlib.Path(refused_log(release_dir) if log is None else log)
    if log is not None:
        read_refusals(log)  # a log that cannot take the decision is an error before the measurement, not after
    evaluations = len(run['rows'])  # the best of these epochs is compared: allow for picking it
    se = noise_floor(before['top1'], before['images'])
    floor = se * selection_margin(evaluations) if min_gain is None else float(min_gain)
    if floor < 0:
        raise ValueError(f'min_gain is a number of points >= 0, got {min_gain}')
    if select_grids and min_gain is not None:
        raise ValueError('min_gain does not apply to an anytime cycle (select_grids): its gate is on the mean over depths')
    gain = best['top1'] - before['top1']
    decision = {'release': release_dir.name, 'from_cycle': record['cycles'][-1]['cycle'],
                'started_from_sha256': record['weights_sha256'], 'run': str(run['dir']), 'epoch': best['epoch'],
                'weights': best['weights'], 'val_top1': best['top1'], 'val_top1_before': before['top1'],
                'val_images': held['images'], 'gain': round(gain, 4), 'required_gain': round(floor, 4),
                'evaluations_compared': evaluations,
                'improved': gain > floor, 'speed': speed_entry['setting'], 'released': False}
    criterion = None
    if select_grids:
        measured = held_out_at_depths(release_dir, best, held, select_grids)
        mean_before, mean_after = (statistics.fmean(measured[k].values()) for k in ('before', 'after'))
        mean_floor = noise_floor(mean_before, measured['images']) * selection_margin(evaluations)
        criterion = {'name': 'anytime', 'split': measured['split'], 'images': measured['images'],
                     'val_top1_at_depth_before': measured['before'], 'val_top1_at_depth': measured['after'],
                     'mean_before': round(mean_before, 4), 'mean': round(mean_after, 4),
                     'mean_gain': round(mean_after - mean_before, 4), 'required_mean_gain': round(mean_floor, 4),
                     'own_grid_gain': round(gain, 4), 'own_grid_allowed_loss': round(se, 4)}
        decision.update(criterion=criterion, improved=mean_after - mean_before > mean_floor and gain > -se)
    if dry_run:
        return decision
    if not decision['improved']:
        try:
            log_refusal(log, decision, command, run, speed_entry)
        except (OSError, ValueError) as e:  # the measurement is not lost with the log
            raise type(e)(f'the refusal could not be logged to {log} ({e}); the decision: {json.dumps(decision)}') from e
        return dict(decision, logged_to=str(log))
    if not eval_dir:
        raise ValueError('eval_dir: the data root whose test split the card measures')
    cycle = record['cycles'][-1]['cycle'] + 1
    staging = release_dir.with_name(f'.{release_dir.name}.cycle-{uuid.uuid4().hex[:8]}')
    staging.mkdir()  # with the umask's permissions (tempfile's folders are private)
    try:  # the new folder is built whole in staging, then swapped in: an interruption leaves the old or the new one
        import timm
        from timm_odevit.hub import export
        folder = staging / release_dir.name
        metrics = export(best['checkpoint'], str(folder), use_ema=best['weights'] == 'ema', eval_dir=eval_dir,
                         eval_split=eval_split, repo_id=repo_id or _registered_repo_id(release_dir.name),
                         train_command=command)
        card = folder / 'README.md'
        model = timm.create_model(f'local-dir:{folder}', pretrained=True)
        depths = card_depths(card, model, metrics, run['args'], eval_dir, eval_split, grids)
        old_rows = read_rows(release_dir / SUMMARY) if (release_dir / SUMMARY).is_file() else []
        rows = merged_summary(old_rows, run['rows'], cycle, first_cycle=record['cycles'][0]['cycle'])
        write_atomic(folder / SUMMARY, rows_text(rows))
        test_predictions(folder, eval_dir, eval_split, metrics['top1'])
        record['cycles'].append(cycle_entry(
            cycle, command, run, best, held, speed_entry, metrics, val_top1_before=before['top1'],
            test_top1_before=record['test']['top1'], started_from_sha256=record['weights_sha256'],
            gate={'needed': decision['required_gain'] if criterion is None else criterion['required_mean_gain'],
                  'evaluations': evaluations},
            **({'criterion': criterion} if criterion else {}), **depths))
        record = new_record(record, folder, run, best, held, metrics)
        cycle0_curve = next((p for p in (release_dir / CYCLE0_CURVE, release_dir / CURVE) if p.is_file()), None)
        keep_cycle0 = not record['cycles'][0].get('per_epoch_record', True) and cycle0_curve is not None and (
            cycle0_curve.name == CYCLE0_CURVE or cycle == record['cycles'][0]['cycle'] + 1)
        if keep_cycle0:  # cycle 0's own curve: the folder's curve before the first cycle redraws it
            write_atomic(folder / CYCLE0_CURVE, cycle0_curve.read_bytes())
        if (release_dir / HISTORY).is_file():  # why each recipe changed: kept across cycles
            write_atomic(folder / HISTORY, (release_dir / HISTORY).read_bytes())
        curve = importlib.util.find_spec('matplotlib') is not None
        if curve:  # the curve across cycles
            plot_cycles(rows, record, folder / CURVE, f'{release_dir.name}: validation top-1 across training cycles')
        text = with_extras(card.read_text(), model, run['args'], run['train_time'], eval_split, curve, log=True)
        write_atomic(card, with_section(text, card_section(record, cycle0_curve=keep_cycle0)))
        write_record(folder, record)
        swap_folder(folder, release_dir, package_dir)
    finally:
        recover(release_dir, package_dir)  # restores the old folder if the swap stopped half-way; drops staging
    decision.update(released=True, cycle=cycle, test_top1=metrics['top1'], test_top5=metrics['top5'],
                    test_images=metrics['images'], test_top1_before=record['cycles'][-1]['test_top1_before'])
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
    p = argparse.ArgumentParser(prog='python -m tools.cycle', description=__doc__.split('\n\n')[0])
    sub = p.add_subparsers(dest='step', required=True)
    s = sub.add_parser('release', help='decide on a finished cycle; release it when it improved')
    s.add_argument('run_dir', help="the cycle's train.py output folder (summary.csv, model_best.pth.tar, args.yaml)")
    s.add_argument('release_dir', help='release/<tag> (with record.json)')
    s.add_argument('--command', required=True, help='the exact command line the cycle ran')
    s.add_argument('--eval-dir', help='data root whose test split the card measures (e.g. ../shared/data/cifar10)')
    s.add_argument('--eval-split', default='test')
    s.add_argument('--speed', default=None, help='the speed setting the run used (a name or the train.py flags)')
    s.add_argument('--speed-record', default=None, help='the JSON of `python -m tools.speed --out` that chose it')
    s.add_argument('--min-gain', type=float, default=None,
                   help='points of held-out top-1 to beat (default: √(2 ln k) binomial standard errors of the release\'s '
                        'held-out top-1, at least one, k = the epochs compared; not used with --select-grids)')
    s.add_argument('--repo-id', default=None, help='Hub id for the card (default: the registered tag\'s)')
    s.add_argument('--no-package-weights', action='store_true',
                   help="leave the package's copy (timm_odevit/weights/<tag>) alone")
    s.add_argument('--dry-run', action='store_true', help='decide only: no export, no test split, nothing written')
    s.add_argument('--refused-log', default=None, metavar='FILE',
                   help='JSON list a refused decision is appended to (default: release/<tag>.refused.json, beside the '
                        'release folder)')
    s.add_argument('--select-grids', type=int, nargs='+', default=None, metavar='N',
                   help='decide on the mean held-out top-1 over these depths (an anytime cycle), measured for the '
                        "release and the cycle on the run's validation split; the own grid may not lose beyond noise")
    s.add_argument('--grids', type=int, nargs='*', default=None, metavar='N',
                   help='depths (Euler steps / iterations) whose test top-1 the card gives (default: 2 3 4 6 8 12 16 24; '
                        'none: --grids with no value)')
    i = sub.add_parser('init', help="record a release as cycle 0 (record.json) from the run it was exported from")
    i.add_argument('release_dir')
    i.add_argument('run_dir', help="cycle 0's train.py output folder")
    i.add_argument('--command', required=True, help="the exact command line of cycle 0's run")
    i.add_argument('--eval-dir', required=True, help='data root whose test split the card measured')
    i.add_argument('--eval-split', default='test')
    i.add_argument('--note', default='')
    i.add_argument('--force', action='store_true')
    i.add_argument('--grids', type=int, nargs='*', default=None, metavar='N',
                   help='depths whose test top-1 the card gives (default: 2 3 4 6 8 12 16 24; none: --grids with no '
                        'value)')
    args = p.parse_args(argv)
    try:
        if args.step == 'init':
            from timm_odevit.evaluation import DEFAULT_GRIDS
            out = init_record(args.release_dir, args.run_dir, args.command, args.eval_dir, args.eval_split,
                              args.force, args.note, DEFAULT_GRIDS if args.grids is None else args.grids)
        else:
            speed_record = read_json(args.speed_record) if args.speed_record else None
            package = None
            if not args.no_package_weights:
                from timm_odevit.models._cfgs import packaged_weights
                candidate = packaged_weights(pathlib.Path(args.release_dir).name).parent
                package = candidate if candidate.is_dir() else None
            out = release_cycle(args.run_dir, args.release_dir, args.command, args.eval_dir, args.eval_split,
                                args.speed, speed_record, args.min_gain, args.dry_run, args.repo_id, package,
                                args.grids, args.select_grids, args.refused_log)
    except (ValueError, OSError) as e:
        raise SystemExit(f'error: {e}')
    print(json.dumps(out, indent=1))


if __name__ == '__main__':
    main()
