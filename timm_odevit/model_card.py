"""Model cards of exported weights: README.md as timm's own Hub cards write it, plus what is ours.

YAML front matter (library_name timm, pipeline_tag, license, datasets, model-index with the
measured top-1/top-5), a model-details table (params, GMACs, image size, solver, training hardware,
wall time, epochs), an install line, usage code for classification, features and embeddings that
runs as written, the learning curve (validation top-1 per epoch, from train.py's summary.csv) and
the papers' BibTeX (timm's own models: the ViT paper for its ViTs, and timm). Text from the user (dataset and
file names, the training command, a run's arguments) is escaped or fenced: it cannot change the card's structure.
"""
import csv
import json
import pathlib
import re
from typing import Any, Dict, List, Optional

import timm
import torch

from ._compat import cpu_flash_attention_op
from .models._cfgs import packaged_weights

LEARNING_CURVE = 'learning_curve.png'
# the README.md, a jinja2 template
TEMPLATE = pathlib.Path(__file__).with_name('model_card_template.md')
TRAINING_LOG = 'summary.csv'  # train.py's per-epoch table, copied into the folder as is

CITATIONS = {
    'arXiv:2511.16501': '''@misc{boned2025odevit,
  title  = {ODE-ViT: Plug \\& Play Attention Layer from the Generalization of the ViT as an Ordinary
            Differential Equation},
  author = {Boned Riera, Carlos and Romero Sánchez, David and Ramos Terrades, Oriol},
  year   = {2025},
  eprint = {2511.16501},
  archivePrefix = {arXiv},
}''',
    'arXiv:2608.04879': '''@misc{recurrent_vit_crossroads2026,
  title  = {Training Crossroads for Recurrent Vision Transformers},
  year   = {2026},
  eprint = {2608.04879},
  archivePrefix = {arXiv},
}''',
    'arXiv:2010.11929': '''@inproceedings{dosovitskiy2021vit,
  title  = {An Image is Worth 16x16 Words: Transformers for Image Recognition at Scale},
  author = {Dosovitskiy, Alexey and Beyer, Lucas and Kolesnikov, Alexander and Weissenborn, Dirk and Zhai, Xiaohua
            and Unterthiner, Thomas and Dehghani, Mostafa and Minderer, Matthias and Heigold, Georg and Gelly, Sylvain
            and Uszkoreit, Jakob and Houlsby, Neil},
  booktitle = {International Conference on Learning Representations (ICLR)},
  year   = {2021},
  eprint = {2010.11929},
  archivePrefix = {arXiv},
}''',
    'timm': '''@misc{rw2019timm,
  author = {Ross Wightman},
  title  = {PyTorch Image Models},
  year   = {2019},
  publisher = {GitHub},
  journal = {GitHub repository},
  doi    = {10.5281/zenodo.4414861},
  howpublished = {\\url{https://github.com/rwightman/pytorch-image-models}}
}''',
}


def md_text(text) -> str:
    """User text for a card's markdown line or table cell: one line, the characters that would change the card's
    structure backslash-escaped (a ``|`` splits no table row, ``<b>`` is text, not HTML, a backtick opens no code)."""
    return re.sub(r'([\\`|<>&])', r'\\\1', ' '.join(str(text).split()))


def md_code(text) -> str:
    """User text as an inline code span that stays in its table cell: one line, ``|`` escaped (tables split their
    cells before code spans), fenced by more backticks than it holds."""
    text = ' '.join(str(text).split()).replace('|', '\\|')
    fence = '`' * (max(map(len, re.findall('`+', text)), default=0) + 1)
    pad = ' ' if text.startswith('`') or text.endswith('`') else ''
    return f'{fence}{pad}{text}{pad}{fence}'


def md_block(text, language: str = '') -> str:
    """User text of any lines (a training command) as a fenced code block, which shows every line as written: no
    line becomes a heading, a table or HTML."""
    text = str(text).strip('\n')
    fence = '`' * max(3, max(map(len, re.findall('`+', text)), default=0) + 1)
    return f'{fence}{language}\n{text}\n{fence}'


def gmacs(model: torch.nn.Module) -> float:
    """Multiply-accumulates (10⁹) of one forward of one image at the model's input size (the model is left in eval
    mode), attention products included: torch's counter has no formula for its CPU attention kernel, so it gets
    torch's own ``sdpa`` count."""
    from torch.utils import flop_counter
    cpu_kernel = cpu_flash_attention_op()
    count = (
        {cpu_kernel: lambda q, k, v, *args, **kwargs: flop_counter.sdpa_flop_count(q, k, v)}
        if cpu_kernel
        else {}
    )
    with (
        flop_counter.FlopCounterMode(display=False, custom_mapping=count) as counter,
        torch.no_grad(),
    ):
        model.eval()(torch.zeros(1, *model.pretrained_cfg.get('input_size', (3, 32, 32))))
    return counter.get_total_flops() / 2e9


def read_summary(path: pathlib.Path) -> List[Dict[str, float]]:
    """train.py's summary.csv as rows of floats (epoch, eval_top1, ...); ValueError naming the file unless it is one."""
    try:
        with open(path, newline='') as f:
            rows = [
                {k: float(v) for k, v in row.items() if v not in ('', None)}
                for row in csv.DictReader(f)
            ]
    except (OSError, UnicodeDecodeError, ValueError, TypeError, csv.Error) as e:
        raise ValueError(
            f'cannot read {path} as train.py\'s summary.csv ({e}): restore or regenerate it'
        ) from e
    if not rows or not all({'epoch', 'eval_top1'} <= row.keys() for row in rows):
        raise ValueError(
            f'{path} is not train.py\'s summary.csv: every row needs epoch and eval_top1'
        )
    return rows


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
        loss.plot(
            epochs, [r['train_loss'] for r in rows], 's--', color='C1', ms=3, label='train loss'
        )
        loss.set_ylabel('train loss', color='C1')
    ax.set_title(title, fontsize=10)
    ax.figure.savefig(out)


def family(model: torch.nn.Module) -> str:
    """'ode' (a solver integrates the depth), 'recurrent' (one block iterated) or 'discrete' (a plain
    stack of blocks: the matched timm ViT baselines, or any other timm model)."""
    from .layers import ContinuousDepthStack
    if not isinstance(stack := getattr(model, 'blocks', None), ContinuousDepthStack):
        return 'discrete'
    return 'recurrent' if stack.solver.method == 'recurrence' else 'ode'


def _depth(model: torch.nn.Module) -> str:
    kind = family(model)
    if kind == 'ode':
        # an adaptive method chooses its steps (per batch): its tolerances say more
        solver = model.blocks.solver
        grid = (
            f'rtol {solver.rtol:g}, atol {solver.atol:g}'
            if solver.is_adaptive
            else f'{solver.steps} steps'
        )
        return f'{solver.method}, {grid} over t ∈ [0, {solver.t_end:g}]'
    if kind == 'recurrent':
        return f'{model.iterations} recurrent iterations of one block'
    return (
        f'{len(model.blocks)} blocks (discrete)' if hasattr(model, 'blocks') else 'discrete layers'
    )


def _epoch(info: Dict[str, Any]) -> str:
    """The checkpoint's epoch, 1-based as the learning curve counts (train.py stores the 0-based index)."""
    epoch = info.get('epoch')
    total = info.get('train_args', {}).get('epochs')
    return (
        'unknown epoch'
        if epoch is None
        else f'epoch {int(epoch) + 1}' + (f' of {total}' if total else '')
    )


def _weights(info: Dict[str, Any]) -> str:
    which = 'EMA' if info.get('ema') else 'raw'
    selected = info.get('selected')
    if selected is None:
        return f'{which} weights'
    why = (
        'the weights the run validated and selected on'
        if (selected == 'ema') == (which == 'EMA')
        else f'chosen at export; the run validated and selected on its {"EMA" if selected == "ema" else "raw"} weights'
    )
    return f'{which} weights ({why})'


def _details(model: torch.nn.Module, metrics: Dict[str, Any], info: Dict[str, Any]) -> List[tuple]:
    size = model.pretrained_cfg.get('input_size', (3, 32, 32))
    train_time = info.get('train_time') or {}
    kind = family(model)
    rows = [
        ('architecture', f"{md_code(info['architecture'])} ({type(model).__name__}"
                         f"{', a timm VisionTransformer' if kind != 'discrete' else ''})"),
        ('parameters', f'{sum(p.numel() for p in model.parameters()) / 1e6:.2f} M'),
        ('GMACs', f'{gmacs(model):.3f}'),
        ('image size', f'{size[1]} × {size[2]}'),
        ('depth', _depth(model)),
    ]
    if kind != 'discrete':
        rows.append(
            (
                'field evaluations per image (NFE)',
                format(metrics['nfe'], 'g') if 'nfe' in metrics else '?',
            )
        )
    rows += [
        (
            "training run's model args (config.json: what loads)",
            md_code(json.dumps(info.get('model_kwargs', {}))),
        ),
        ('epochs', md_text(info.get('train_args', {}).get('epochs', '?'))),
        (
            'checkpoint',
            f"{md_text(info.get('checkpoint_file', 'train.py checkpoint'))}, {_epoch(info)}, "
            f'{_weights(info)}',
        ),
    ]
    if train_time:
        rows += [
            ('training hardware', md_text(train_time.get('hardware', '?'))),
            (
                'training wall time',
                f"{train_time['seconds'] / 3600:.1f} h ({len(train_time['epochs'])} epochs timed)",
            ),
        ]
    split = md_text(metrics.get('split', 'test'))
    dataset = md_text(metrics.get('dataset_name') or metrics.get('dataset') or '?')
    top1 = metrics['top1']
    n = metrics['images']
    rows.append((f"top-1 (95 % interval) / top-5 ({n:,} {split} images of {dataset}, "
                 f"{len(metrics.get('classes') or []) or '?'} classes, measured on these weights)",
                 f"{top1:.2f} ± {half_width_95(top1, n):.2f} / {metrics['top5']:.2f}"))
    return rows


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
    'kd_model_name',
    'kd_model_kwargs',
    'kd_teacher_checkpoint',
    'kd_distill_type',
    # kd_*: the teacher (name, kwargs, weights file) and the kind of distillation
    'kd_mapping',
)
_ZERO_SHOWN = {'color_jitter', 'hflip', 'warmup_epochs'}


def _shown(key: str, args: Dict[str, Any]) -> bool:
    value = args.get(key)
    off = {
        'model_ema_decay': not args.get('model_ema'),
        'kd_distill_type': not args.get('kd_model_name'),
        # a knob shown only where it acted
        'kd_mapping': args.get('kd_distill_type') != 'trajectory',
    }
    if value is None or value is False or value in ('', {}) or off.get(key):
        return False
    return key in _ZERO_SHOWN or value != 0


def card_data(
    name: str,
    model: torch.nn.Module,
    metrics: Dict[str, Any],
    dataset: Optional[str] = None,
    license: str = 'apache-2.0',
):
    """huggingface_hub ``ModelCardData``: the front matter, with a model-index of the measured top-1/top-5 on
    the evaluated split and dataset."""
    from huggingface_hub import EvalResult, ModelCardData
    dataset = dataset or metrics.get('dataset') or 'unknown'
    display = metrics.get('dataset_name') or dataset
    common = dict(
        task_type='image-classification',
        task_name='Image Classification',
        dataset_type=dataset,
        dataset_name=display,
        dataset_split=metrics.get('split', 'test'),
        metric_type='accuracy',
    )
    kind_tags = ['continuous-depth'] if family(model) != 'discrete' else ['baseline']
    return ModelCardData(
        model_name=name,
        library_name='timm',
        pipeline_tag='image-classification',
        license=license,
        tags=['image-classification', 'timm', 'timm_odevit'] + kind_tags,
        datasets=[dataset],
        metrics=['accuracy'],
        eval_results=[
            EvalResult(
                metric_name='Top-1 accuracy', metric_value=round(metrics['top1'], 2), **common
            ),
            EvalResult(
                metric_name='Top-5 accuracy', metric_value=round(metrics['top5'], 2), **common
            ),
        ],
    )


def _ours(model: torch.nn.Module) -> bool:
    """Whether the model's architecture is registered by this package (else it is timm's own)."""
    arch = model.pretrained_cfg.get('architecture', '')
    return timm.models.is_model(arch) and timm.models.model_entrypoint(arch).__module__.startswith(
        'timm_odevit'
    )


def papers(model: torch.nn.Module) -> List[str]:
    """The :data:`CITATIONS` keys a card cites: the papers its pretrained cfg names (``paper_ids``); for timm's own
    models the ViT paper (its ViTs) and timm."""
    from timm.models.vision_transformer import VisionTransformer
    named = [p.strip() for p in str(model.pretrained_cfg.get('paper_ids') or '').split(',')]
    if not _ours(model):
        named += ['arXiv:2010.11929'] * isinstance(model, VisionTransformer) + ['timm']
    return [p for p in dict.fromkeys(named) if p in CITATIONS]


def _description(model: torch.nn.Module, display: str) -> str:
    arch = model.pretrained_cfg.get('architecture', '')
    display = md_text(display)
    if not _ours(model):
        return (f"timm's own `{arch}`, trained on {display} with the train.py wrapper of "
                '`timm_odevit`, not yet published (loading it needs timm only).')
    what = {
        'ode': 'A continuous-depth Vision Transformer (its depth is an ODE integrated by a solver)',
        'recurrent': 'A recurrent Vision Transformer (one block iterated; the number of iterations is settable)',
        'discrete': 'A discrete Vision Transformer baseline (a plain timm model, blocks of its own weights)',
    }[family(model)]
    return (f'{what} from `timm_odevit` (not yet published), trained on {display}; a timm '
            'model once `import timm_odevit` has registered it.')


def _retune(model: torch.nn.Module, measured: bool = False) -> str:
    where = (
        'see "Accuracy at other depths"'
        if measured
        else 'measure first (timm_odevit.anytime.accuracy_at_budgets)'
    )
    kind = family(model)
    if kind == 'ode':
        steps = model.blocks.solver.steps
        change = f'steps={2 * steps}' if steps else "method='euler', steps=12"
        return f'\nmodel.set_solver({change})  # another grid: accuracy changes with it; {where}'
    if kind == 'recurrent':
        return f'\nmodel.set_iterations({2 * model.iterations})  # beyond the training horizon: accuracy changes; {where}'
    return ''


def half_width_95(top1: float, images: int) -> float:
    """Half width (points) of the 95 % binomial interval of a top-1 of ``top1`` % on ``images`` images:
    1.96·√(p(100 − p)/n)."""
    return 1.96 * (top1 * (100 - top1) / images) ** .5


def _grid_section(model: torch.nn.Module, metrics: Dict[str, Any], train_depth=None) -> str:
    """The card's "Accuracy at other depths" table from ``metrics['grids']`` (hub.evaluate_grids), if measured;
    ``train_depth``: the (lo, hi) the last run drew its depths from (``train_depth`` model kwarg), if any."""
    if not (rows := metrics.get('grids')):
        return ''
    recurrent = family(model) == 'recurrent'
    loaded = model.iterations if recurrent else model.blocks.solver.steps
    what = 'iterations' if recurrent else f'{model.blocks.solver.method} steps'
    if train_depth:
        label = 'loaded'
        how = (
            f'the last training run drew a depth from {train_depth[0]}–{train_depth[1]} per update '
            f'(train_depth); the weights are loaded at {loaded}'
        )
    elif len(getattr(model, 'stages', ())) > 1:
        label = 'loaded'
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


def model_card(
    name: str,
    model: torch.nn.Module,
    metrics: Dict[str, Any],
    info: Dict[str, Any],
    dataset: Optional[str] = None,
    repo_id: Optional[str] = None,
    license: str = 'apache-2.0',
    train_command: Optional[str] = None,
    learning_curve: bool = False,
    training_log: bool = False,
) -> str:
    """README.md text (a huggingface_hub ``ModelCard``): front matter, details, usage, learning curve, citation.
    ``metrics``: :func:`timm_odevit.hub.evaluate`'s result (split, classes, images) with 'dataset' /
    'dataset_name'; ``info``: :func:`timm_odevit.hub.model_from_checkpoint`'s."""
    from huggingface_hub import ModelCard
    size = model.pretrained_cfg.get('input_size', (3, 32, 32))
    data = card_data(name, model, metrics, dataset, license)
    args = info.get('train_args', {})
    selected = info.get('selected', 'ema' if args.get('model_ema') else 'raw')
    weights = (
        ' of the EMA weights (what train.py validates and selects by when EMA is on)'
        if selected == 'ema'
        else ''
    )
    log = (
        f" Every epoch's numbers: [{TRAINING_LOG}]({TRAINING_LOG}) (train.py's own log)."
        if training_log
        else ''
    )
    curve = (
        f'\n## Learning curve\n\n![validation top-1 per epoch]({LEARNING_CURVE})\n\nValidation top-1{weights} on '
        f"the run's validation split during training, epochs counted from 1; the card's top-1 is measured at "
        f"export on its {md_text(metrics.get('split', 'test'))} images.{log}\n"
        if learning_curve
        else ''
    )
    grids = _grid_section(model, metrics, (args.get('model_kwargs') or {}).get('train_depth'))
    citation = '\n\n'.join(CITATIONS[p] for p in papers(model))
    discrete = family(model) == 'discrete'
    grey = size[0] == 1  # read as timm reads images for a one-channel model
    tag = (repo_id or '').split('/')[-1]
    # a release whose weights ship in the wheel
    packaged = bool(repo_id) and packaged_weights(tag).is_file()
    hub = (
        f'`hf-hub:{repo_id}` once this folder is uploaded there'
        if repo_id
        else 'the Hub once uploaded'
    )
    return str(
        ModelCard.from_template(
            data,
            template_path=str(TEMPLATE),
            name=name,
            description=_description(model, metrics.get('dataset_name') or data.datasets[0]),
            table='\n'.join(f'| {k} | {v} |' for k, v in _details(model, metrics, info)),
            training=(
                f'\n\n{md_block(train_command, "bash")}\n\n'
                if train_command and train_command.strip()
                else ' timm train.py via `python -m timm_odevit.train`\n'
            ),
            recipe=', '.join(md_text(f'{k}={args[k]}') for k in RECIPE_KEYS if _shown(k, args)),
            packaged=packaged,
            hub=hub,
            load=tag if packaged else f'hf-hub:{repo_id}' if repo_id else 'local-dir:PATH',
            width=size[2],
            height=size[1],
            mode='L' if grey else 'RGB',
            colour='96' if grey else '(128, 96, 64)',
            final='the last block output' if discrete else 'the state at the final time',
            points='blocks' if discrete else 'time points',
            retune=_retune(model, bool(grids)),
            curve=curve,
            grids=grids,
            citation=f'\n## Citation\n\n```bibtex\n{citation}\n```\n' if citation else '',
        )
    )
