"""Model cards of exported weights: README.md as timm's own Hub cards write it, plus what is ours.

YAML front matter (library_name timm, pipeline_tag, license, datasets, model-index with the measured top-1/top-5), a
model-details table (architecture, params, image size, depth and solver, epochs, the measured top-1), an install line,
usage code for classification, features and embeddings that runs as written, and the papers' BibTeX (timm's own
models: the ViT paper for its ViTs, and timm); the layout is the jinja2 template ``model_card_template.md``. Text from
the user (dataset and file names, the training command, a run's arguments) is escaped or fenced: it cannot change the
card's structure.
"""
import json
import pathlib
from typing import Any, Dict, List, Optional

import timm
import torch

from ._markdown import md_block, md_code, md_text

# the README.md, a jinja2 template
TEMPLATE = pathlib.Path(__file__).with_name('model_card_template.md')
# where the usage code's depth change sends the reader (a release's card has its own depth table: tools/card_extras.py)
MEASURE = 'measure first (timm_odevit.anytime.accuracy_at_budgets)'

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
        grid = f'rtol {solver.rtol:g}, atol {solver.atol:g}' if solver.is_adaptive else f'{solver.steps} steps'
        return f'{solver.method}, {grid} over t ∈ [0, {solver.t_end:g}]'
    if kind == 'recurrent':
        return f'{model.iterations} recurrent iterations of one block'
    return f'{len(model.blocks)} blocks (discrete)' if hasattr(model, 'blocks') else 'discrete layers'


def _weights(info: Dict[str, Any]) -> str:
    which = 'EMA' if info.get('ema') else 'raw'
    selected = info.get('selected')
    if selected is None:
        return f'{which} weights'
    if selected == which.lower():  # 'ema' or 'raw'
        return f'{which} weights (the weights the run validated and selected on)'
    other = 'raw' if info.get('ema') else 'EMA'
    return f'{which} weights (chosen at export; the run validated and selected on its {other} weights)'


def _details(model: torch.nn.Module, metrics: Dict[str, Any], info: Dict[str, Any]) -> List[tuple]:
    size = model.pretrained_cfg.get('input_size', (3, 32, 32))
    kind = family(model)
    rows = [
        ('architecture', f"{md_code(info['architecture'])} ({type(model).__name__}"
                         f"{', a timm VisionTransformer' if kind != 'discrete' else ''})"),
        ('parameters', f'{sum(p.numel() for p in model.parameters()) / 1e6:.2f} M'),
        ('image size', f'{size[1]} × {size[2]}'),
        ('depth', _depth(model)),
    ]
    if kind != 'discrete':
        rows.append(('field evaluations per image (NFE)', format(metrics['nfe'], 'g') if 'nfe' in metrics else '?'))
    checkpoint = md_text(info.get('checkpoint_file', 'train.py checkpoint'))
    epochs = info.get('train_args', {}).get('epochs')
    epoch = 'unknown epoch'  # train.py stores the 0-based index; the card counts from 1
    if info.get('epoch') is not None:
        epoch = f"epoch {int(info['epoch']) + 1}" + (f' of {epochs}' if epochs else '')
    rows += [
        ("training run's model args (config.json: what loads)", md_code(json.dumps(info.get('model_kwargs', {})))),
        ('epochs', md_text('?' if epochs is None else epochs)),
        ('checkpoint', f'{checkpoint}, {epoch}, {_weights(info)}'),
    ]
    split = md_text(metrics.get('split', 'test'))
    dataset = md_text(metrics.get('dataset_name') or metrics.get('dataset') or '?')
    top1 = metrics['top1']
    n = metrics['images']
    rows.append((f"top-1 (95 % interval) / top-5 ({n:,} {split} images of {dataset}, "
                 f"{len(metrics.get('classes') or []) or '?'} classes, measured on these weights)",
                 f"{top1:.2f} ± {half_width_95(top1, n):.2f} / {metrics['top5']:.2f}"))
    return rows


def card_data(name: str, model: torch.nn.Module, metrics: Dict[str, Any]):
    """huggingface_hub ``ModelCardData``: the front matter, with a model-index of the measured top-1/top-5 on
    the evaluated split and dataset (``metrics['dataset']``, a Hub dataset id)."""
    from huggingface_hub import EvalResult, ModelCardData
    dataset = metrics.get('dataset') or 'unknown'
    display = metrics.get('dataset_name') or dataset
    common = dict(
        task_type='image-classification',
        task_name='Image Classification',
        dataset_type=dataset,
        dataset_name=display,
        dataset_split=metrics.get('split', 'test'),
        metric_type='accuracy',
    )
    kind_tag = 'baseline' if family(model) == 'discrete' else 'continuous-depth'
    return ModelCardData(
        model_name=name,
        library_name='timm',
        pipeline_tag='image-classification',
        license='apache-2.0',
        tags=['image-classification', 'timm', 'timm_odevit', kind_tag],
        datasets=[dataset],
        metrics=['accuracy'],
        eval_results=[
            EvalResult(
                metric_name=f'Top-{k} accuracy',
                metric_value=round(metrics[f'top{k}'], 2),
                **common,
            )
            for k in (1, 5)
        ],
    )


def _ours(model: torch.nn.Module) -> bool:
    """Whether the model's architecture is registered by this package (else it is timm's own)."""
    arch = model.pretrained_cfg.get('architecture', '')
    return timm.models.is_model(arch) and timm.models.model_entrypoint(arch).__module__.startswith('timm_odevit')


def papers(model: torch.nn.Module) -> List[str]:
    """The :data:`CITATIONS` keys a card cites: the papers its pretrained cfg names (``paper_ids``); for timm's own
    models the ViT paper (its ViTs) and timm."""
    from timm.models.vision_transformer import VisionTransformer
    named = [p.strip() for p in str(model.pretrained_cfg.get('paper_ids') or '').split(',')]
    if not _ours(model):
        named += ['arXiv:2010.11929', 'timm'] if isinstance(model, VisionTransformer) else ['timm']
    return [p for p in dict.fromkeys(named) if p in CITATIONS]


def _description(model: torch.nn.Module, display: str) -> str:
    arch = model.pretrained_cfg.get('architecture', '')
    display = md_text(display)
    if not _ours(model):
        return (
            f"timm's own `{arch}`, trained on {display} with the train.py wrapper of `timm_odevit`, not yet published "
            '(loading it needs timm only).'
        )
    what = {
        'ode': 'A continuous-depth Vision Transformer (its depth is an ODE integrated by a solver)',
        'recurrent': 'A recurrent Vision Transformer (one block iterated; the number of iterations is settable)',
        'discrete': 'A discrete Vision Transformer baseline (a plain timm model, blocks of its own weights)',
    }[family(model)]
    return (
        f'{what} from `timm_odevit` (not yet published), trained on {display}; a timm model once `import timm_odevit` '
        'has registered it.'
    )


def _retune(model: torch.nn.Module) -> str:
    """The usage code's line that doubles the depth (none for a discrete model)."""
    kind = family(model)
    if kind == 'discrete':
        return ''
    depth = 2 * model.blocks.solver.steps  # a recurrence steps once per iteration
    if kind == 'ode':  # an odeified timm ViT sets it on its stack
        owner = 'model' if hasattr(model, 'set_solver') else 'model.blocks'
        return f'\n{owner}.set_solver(steps={depth})  # another grid: accuracy changes with it; {MEASURE}'
    return f'\nmodel.set_iterations({depth})  # beyond the training horizon: accuracy changes; {MEASURE}'


def half_width_95(top1: float, images: int) -> float:
    """Half width (points) of the 95 % binomial interval of a top-1 of ``top1`` % on ``images`` images:
    1.96·√(p(100 − p)/n)."""
    return 1.96 * (top1 * (100 - top1) / images) ** .5


def model_card(
    name: str,
    model: torch.nn.Module,
    metrics: Dict[str, Any],
    info: Dict[str, Any],
    repo_id: Optional[str] = None,
    train_command: Optional[str] = None,
) -> str:
    """README.md text (a huggingface_hub ``ModelCard``): front matter, details, usage, citation.
    ``metrics``: :func:`timm_odevit.evaluation.evaluate`'s result (split, classes, images) with 'dataset' /
    'dataset_name'; ``info``: :func:`timm_odevit.checkpoint.model_from_checkpoint`'s."""
    from huggingface_hub import ModelCard
    size = model.pretrained_cfg.get('input_size', (3, 32, 32))
    data = card_data(name, model, metrics)
    training = ' timm train.py via `python -m timm_odevit.train`.'
    if train_command and train_command.strip():
        training = f'\n\n{md_block(train_command, "bash")}'
    return str(
        ModelCard.from_template(
            data,
            template_path=str(TEMPLATE),
            name=name,
            description=_description(model, data.eval_results[0].dataset_name),
            details=_details(model, metrics, info),
            training=training,
            load=f'hf-hub:{repo_id}' if repo_id else 'local-dir:PATH',
            size=size,
            grey=size[0] == 1,  # read as timm reads images for a one-channel model
            discrete=family(model) == 'discrete',
            retune=_retune(model),
            citations=[CITATIONS[p] for p in papers(model)],
        )
    )
