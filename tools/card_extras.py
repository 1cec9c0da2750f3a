"""What a release's model card adds to the card odevit-export writes (release tooling, not installed).

An exported card states the weights, how to load them and their measured accuracy. A release also gives the cost of one
forward (GMACs), the run's recipe (train.py arguments), its hardware and wall time (``train_time.json``), and the run's
per-epoch record (``summary.csv``) drawn as a learning curve; where the wheel carries its weights, its code loads the
registered tag (:func:`packaged_usage`). :func:`extend_card` adds them to an exported folder; :func:`with_extras` to a
card's text (``tools.cycle`` draws its own curve across cycles). ``tools.cycle`` also measures a release's top-1 at
other depths (``timm_odevit.evaluation.evaluate_grids``) on the card's images: :func:`with_depths` adds the table.
"""
import csv
import importlib.util
import pathlib
import re
import shutil
from typing import Any, Callable, Dict, List, Optional

import torch

from timm_odevit._checks import is_real, read_json, write_atomic
from timm_odevit._markdown import md_text
from timm_odevit.model_card import MEASURE, family, half_width_95
from timm_odevit.models._cfgs import packaged_weights

LEARNING_CURVE = 'learning_curve.png'
TRAINING_LOG = 'summary.csv'  # train.py's per-epoch table, copied into the folder as is
# train.py arguments the card's recipe line names: a 0 is shown where it switches off a default that is on
RECIPE_KEYS = (
    'epochs',
    'batch_size',
    'opt',
    'lr',
    'weight_decay',
    'sched',
    'warmup_epochs',
    'smoothing',
    'hflip',
    'color_jitter',
    'mixup',
    'cutmix',
    'aa',
    'model_ema',
    'model_ema_decay',
    'clip_grad',
    'train_split',
    'val_split',
    # kd_*: the teacher (name, kwargs, weights file) and the kind of distillation
    'kd_model_name',
    'kd_model_kwargs',
    'kd_teacher_checkpoint',
    'kd_distill_type',
    'kd_mapping',
)
ZERO_SHOWN = {'color_jitter', 'hflip', 'warmup_epochs'}


def cpu_flash_attention_op() -> Optional[Callable]:
    """The aten kernel torch's CPU ``scaled_dot_product_attention`` dispatches to (torch >= 2.2), else None: a private
    name of torch (tests/test_compat.py checks it)."""
    return getattr(torch.ops.aten, '_scaled_dot_product_flash_attention_for_cpu', None)


def gmacs(model: torch.nn.Module) -> float:
    """Multiply-accumulates (10⁹) of one forward of one image at the model's input size (the model is left in eval
    mode), attention products included: torch's counter has no formula for its CPU attention kernel, so it gets
    torch's own ``sdpa`` count."""
    from torch.utils import flop_counter
    cpu_kernel = cpu_flash_attention_op()
    count = {}
    if cpu_kernel:
        count[cpu_kernel] = lambda q, k, v, *args, **kwargs: flop_counter.sdpa_flop_count(q, k, v)
    with flop_counter.FlopCounterMode(display=False, custom_mapping=count) as counter, torch.no_grad():
        model.eval()(torch.zeros(1, *model.pretrained_cfg.get('input_size', (3, 32, 32))))
    return counter.get_total_flops() / 2e9


def read_summary(path: pathlib.Path) -> List[Dict[str, float]]:
    """train.py's summary.csv as rows of floats (epoch, eval_top1, ...); ValueError naming the file unless it is one."""
    try:
        with open(path, newline='') as f:
            rows = [{k: float(v) for k, v in row.items() if v not in ('', None)} for row in csv.DictReader(f)]
    except (OSError, UnicodeDecodeError, ValueError, TypeError, csv.Error) as e:
        raise ValueError(f"cannot read {path} as train.py's summary.csv ({e}): restore or regenerate it") from e
    if not rows or not all({'epoch', 'eval_top1'} <= row.keys() for row in rows):
        raise ValueError(f"{path} is not train.py's summary.csv: every row needs epoch and eval_top1")
    return rows


def read_train_time(path: pathlib.Path) -> Dict[str, Any]:
    """The run's ``train_time.json`` ({} when there is none); ValueError naming the file unless it holds "seconds"
    (a number) and "epochs" (an object)."""
    if not path.is_file():
        return {}
    timed = read_json(path)
    if not (is_real(timed.get('seconds')) and isinstance(timed.get('epochs'), dict)):
        raise ValueError(f'{path} needs "seconds" (a number) and "epochs" (an object): restore or regenerate it')
    return timed


def plot_learning_curve(rows: List[Dict[str, float]], out: pathlib.Path, title: str) -> None:
    """Validation top-1 (and train loss) per 1-based epoch as a PNG (a ``matplotlib.figure.Figure``:
    pyplot's global state and backend are left alone)."""
    from matplotlib.figure import Figure
    epochs = [int(r['epoch']) + 1 for r in rows]  # train.py's epochs are 0-based
    ax = Figure(figsize=(5.5, 3.4), dpi=110, layout='tight').subplots()
    ax.plot(epochs, [r['eval_top1'] for r in rows], 'o-', color='C0', label='validation top-1')
    ax.set_xlabel('epoch')
    ax.set_ylabel('validation top-1 (%)', color='C0')
    ax.grid(alpha=.3)
    if all('train_loss' in r for r in rows):
        loss = ax.twinx()
        loss.plot(epochs, [r['train_loss'] for r in rows], 's--', color='C1', ms=3, label='train loss')
        loss.set_ylabel('train loss', color='C1')
    ax.set_title(title, fontsize=10)
    ax.figure.savefig(out)


def shown(key: str, args: Dict[str, Any]) -> bool:
    """Whether the recipe line names ``key``: set, and a knob that acted in this run."""
    value = args.get(key)
    off = {
        'model_ema_decay': not args.get('model_ema'),
        'kd_distill_type': not args.get('kd_model_name'),
        'kd_mapping': args.get('kd_distill_type') != 'trajectory',
    }
    if value is None or value is False or value in ('', {}) or off.get(key):
        return False
    return key in ZERO_SHOWN or value != 0


def recipe(args: Dict[str, Any]) -> str:
    """The card's recipe line: the :data:`RECIPE_KEYS` the run set, as ``key=value``."""
    return ', '.join(md_text(f'{k}={args[k]}') for k in RECIPE_KEYS if shown(k, args))


def depth_section(model: torch.nn.Module, metrics: Dict[str, Any], train_depth=None) -> str:
    """The card's "Accuracy at other depths" table from ``metrics['grids']`` (``evaluate_grids``'s rows on the
    ``metrics['images']`` images of ``metrics['split']``); ``train_depth``: the (lo, hi) the last run drew its depths
    from (``train_depth`` model kwarg), if any."""
    rows = metrics['grids']
    solver = model.blocks.solver
    loaded = solver.steps  # a recurrence's iterations
    what = 'iterations' if family(model) == 'recurrent' else f'{solver.method} steps'
    label = 'loaded'
    if train_depth:
        how = (
            f'the last training run drew a depth from {train_depth[0]}–{train_depth[1]} per update (train_depth); '
            f'the weights are loaded at {loaded}'
        )
    elif len(getattr(model, 'stages', ())) > 1:
        how = (
            f'the weights were trained with a loss at iterations {", ".join(map(str, model.stages))} '
            f'(deep supervision) and are loaded at {loaded}'
        )
    else:
        label = 'trained'
        how = f'the weights were trained and are loaded at {loaded}'
    table = '\n'.join(
        f"| {r['depth']}{f' ({label})' if r['depth'] == loaded else ''} | {r['nfe']:g} | {r['top1']:.2f} ± "
        f"{half_width_95(r['top1'], metrics['images']):.2f} |"
        for r in rows
    )
    split = md_text(metrics.get('split', 'test'))
    return (
        f"\n## Accuracy at other depths\n\nTop-1 (%) of these weights on the same {metrics.get('images')} "
        f"{split} images at other depths ({what}; {how}). Depth is a run-time setting, but "
        "accuracy depends on it:\n\n"
        f'| {what} | field evaluations / image | top-1 (95 % binomial interval) |\n|---|---|---|\n{table}\n'
    )


def with_depths(card: str, model: torch.nn.Module, metrics: Dict[str, Any], train_args: Dict[str, Any]) -> str:
    """An exported ``card`` with the :func:`depth_section` of ``metrics['grids']`` placed before its citation (the
    ``train_depth`` of the run's ``--model-kwargs`` in ``train_args``), its usage code pointing to the table."""
    train_depth = (train_args.get('model_kwargs') or {}).get('train_depth')
    card = card.replace(MEASURE, 'see "Accuracy at other depths"')
    section = depth_section(model, metrics, train_depth)
    at = card.find('\n## Citation')
    return card + section if at < 0 else card[:at] + section + card[at:]


def packaged_usage(card: str) -> str:
    """An exported ``card`` whose ``--repo-id`` ends in a tag whose weights the wheel carries (``timm_odevit/weights/
    <tag>``: a release of a registered tag): its usage says so and its code loads the tag, with no network, where the
    export named ``hf-hub:ORG/TAG`` (which loads only once uploaded). Other cards are returned as they are."""
    named = re.search(r'the code below names `hf-hub:([^`]+)`', card)
    repo_id = named.group(1) if named else ''
    tag = repo_id.split('/')[-1]
    if not (repo_id and packaged_weights(tag).is_file()):
        return card
    exported = (f'The weights load from this folder as `local-dir:PATH`; the code below names `hf-hub:{repo_id}`, '
                'which loads only once this folder is uploaded there (until then, put `local-dir:PATH` in its place).')
    if exported not in card:
        raise ValueError("the exported card's usage paragraph is not the one packaged_usage replaces: update it")
    packaged = (f'The wheel carries these weights: `{tag}` loads them with no network; this folder also loads as '
                f'`local-dir:PATH`, and `hf-hub:{repo_id}` once this folder is uploaded there.')
    return card.replace(exported, packaged).replace(f"'hf-hub:{repo_id}'", f"'{tag}'")


def with_extras(card: str, model: torch.nn.Module, train_args: Dict[str, Any], train_time: Dict[str, Any],
                split: str = 'test', curve: bool = False, log: bool = False) -> str:
    """An exported ``card`` with the GMACs row, the training hardware and wall time rows, the recipe line and, with
    ``curve``, the learning-curve section (linking summary.csv with ``log``) placed before its citation; a packaged
    release's usage (:func:`packaged_usage`)."""
    rows = packaged_usage(card).split('\n')
    at = next(i for i, row in enumerate(rows) if row.startswith('| parameters |')) + 1
    rows.insert(at, f'| GMACs | {gmacs(model):.3f} |')
    if train_time:
        at = next(i for i, row in enumerate(rows) if row.startswith('| top-1 '))
        rows[at:at] = [
            f"| training hardware | {md_text(train_time.get('hardware', '?'))} |",
            f"| training wall time | {train_time['seconds'] / 3600:.1f} h ({len(train_time['epochs'])} epochs timed) |",
        ]
    card = '\n'.join(rows).replace('\n\n## Usage', f'\n({recipe(train_args)}).\n\n## Usage', 1)
    if not curve:
        return card
    ema = train_args.get('model_ema') and not train_args.get('model_ema_force_cpu')
    weights = ' of the EMA weights (what train.py validates and selects by when EMA is on)' if ema else ''
    link = f" Every epoch's numbers: [{TRAINING_LOG}]({TRAINING_LOG}) (train.py's own log)." if log else ''
    section = (
        f'\n## Learning curve\n\n![validation top-1 per epoch]({LEARNING_CURVE})\n\nValidation top-1{weights} on '
        f"the run's validation split during training, epochs counted from 1; the card's top-1 is measured at "
        f'export on its {md_text(split)} images.{link}\n'
    )
    at = card.find('\n## Citation')
    return card + section if at < 0 else card[:at] + section + card[at:]


def extend_card(folder, run_dir, train_args: Dict[str, Any], split: str = 'test') -> None:
    """Add to an exported ``folder`` the run's summary.csv, its learning curve (with matplotlib) and the card's
    extras (:func:`with_extras`) from the train.py run folder ``run_dir`` with arguments ``train_args``. Files that
    do not read are named before anything is written."""
    import timm
    import timm_odevit  # noqa: F401
    folder = pathlib.Path(folder)
    run_dir = pathlib.Path(run_dir)
    train_time = read_train_time(run_dir / 'train_time.json')
    rows = read_summary(run_dir / TRAINING_LOG) if (run_dir / TRAINING_LOG).is_file() else None
    curve = rows is not None and importlib.util.find_spec('matplotlib') is not None
    if rows is not None:
        shutil.copy(run_dir / TRAINING_LOG, folder / TRAINING_LOG)
    if curve:
        plot_learning_curve(rows, folder / LEARNING_CURVE, f'{folder.name}: validation top-1 per epoch')
    model = timm.create_model(f'local-dir:{folder}', pretrained=True)
    card = (folder / 'README.md').read_text()
    write_atomic(folder / 'README.md', with_extras(card, model, train_args, train_time, split, curve, rows is not None))
