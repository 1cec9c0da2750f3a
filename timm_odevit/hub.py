"""Pretrained weights in timm's Hugging Face Hub format: export, verify, publish.

    odevit-export CHECKPOINT OUT_DIR [--ema] [--eval-dir DATA --eval-split test] [--repo-id ORG/NAME]
    odevit-publish OUT_DIR --repo-id ORG/NAME [--private] [--dry-run]

An exported folder holds ``model.safetensors`` and ``config.json`` written by timm's own ``save_for_hf``
(architecture, num_classes, num_features, global_pool, model_args with the solver settings, pretrained_cfg with
mean/std/input size/crop) and a ``README.md`` model card whose ``model-index`` accuracy is MEASURED on the given split
with the exported weights. It loads with ``timm.create_model('local-dir:OUT_DIR', pretrained=True)`` or, once
uploaded, ``timm.create_model('hf-hub:ORG/NAME', pretrained=True)`` (after ``import timm_odevit``).
"""
import argparse
import json
import os
import pathlib
from typing import Any, Dict, List, Optional, Tuple

import torch

from ._checks import replaced_folder
from .checkpoint import MODEL_FILES, model_from_checkpoint, verify_folder
from .data import image_folder
from .evaluation import evaluate
from .loader import short
from .model_card import model_card
from .models._cfgs import CIFAR10_LABELS

REPO_ID = 'a valid Hub repo id: give ORG/NAME'
# an earlier export or release may also hold its run's per-epoch record and learning curve (tools/card_extras.py)
EXPORT_FILES = MODEL_FILES + ('summary.csv', 'learning_curve.png')
KNOWN_DATASETS = {'cifar10': ('CIFAR-10', CIFAR10_LABELS, 10), 'cifar100': ('CIFAR-100', None, 100)}


# ---- export -------------------------------------------------------------------------------------
def resolve_dataset(dataset: Optional[str], classes: List[str], eval_dir: str) -> Tuple[str, str]:
    """(Hub dataset id, display name) of the evaluation: ``dataset`` checked against the evaluated classes
    for the known ones, else recognised from the classes (CIFAR-10), else the eval folder's name."""
    if dataset is None and tuple(classes) == CIFAR10_LABELS:
        dataset = 'cifar10'
    if dataset is None:
        return (pathlib.Path(eval_dir).resolve().name,) * 2
    check_hub_id('--dataset', dataset, 'a Hub dataset id (NAME or ORG/NAME, e.g. cifar10)', slashes=(0, 1))
    known = KNOWN_DATASETS.get(dataset.lower())
    if known is None:
        return dataset, dataset
    display, labels, count = known
    fits = tuple(classes) == labels if labels else len(classes) == count
    if not fits:
        raise ValueError(
            f'--dataset {dataset} does not describe the evaluated folder {eval_dir} ({len(classes)} classes '
            f'{short(classes)}, {display} has {count}): give the dataset it holds'
        )
    return dataset.lower(), display


def export(
    checkpoint: str,
    out_dir: str,
    use_ema: Optional[bool] = None,
    eval_dir: Optional[str] = None,
    eval_split: str = 'test',
    repo_id: Optional[str] = None,
    dataset: Optional[str] = None,
    train_command: Optional[str] = None,
    model_kwargs: Optional[Dict[str, Any]] = None,
    device: str = 'cpu',
    batch_size: int = 250,
    workers: int = 2,
    progress: bool = False,
) -> Dict[str, Any]:
    """train.py checkpoint -> Hub folder (model.safetensors, config.json with the classes' label_names, README.md
    model card). ``use_ema`` None: the weights the run selected on (EMA with --model-ema). The card's split, dataset,
    classes and image count are those of the evaluation (a release's card adds top-1 at other depths:
    tools/card_extras.with_depths). ``out_dir`` may be a symbolic link: the folder it points to is replaced. Returns
    the metrics."""
    from timm.models import save_for_hf
    if not eval_dir:
        raise ValueError('the model card needs a measured accuracy: pass eval_dir (an ImageFolder with a test split)')
    out = pathlib.Path(out_dir).resolve()
    # a new folder, an empty one, or an earlier export (whose files it replaces); a file: NotADirectoryError
    foreign = sorted(p.name for p in out.iterdir() if p.name not in EXPORT_FILES) if out.exists() else []
    if foreign:
        raise ValueError(
            f'out_dir {out} holds files an export does not write ({short(foreign)}): choose a new or empty folder '
            '(an earlier export is replaced as a whole)'
        )
    model, info = model_from_checkpoint(checkpoint, use_ema=use_ema, model_kwargs=model_kwargs)
    if repo_id:  # checked before the (long) evaluation; the card names it (save_for_hf writes no source into config)
        check_hub_id('--repo-id', repo_id, REPO_ID)
    # a training recipe (the card's command keeps it), not part of the weights
    if getattr(model, 'train_depth', None):
        model.set_train_depth(None)
    classes, _ = image_folder(eval_dir, eval_split)
    _check_training_classes(info['train_args'], classes, str(pathlib.Path(eval_dir) / eval_split))
    dataset, dataset_name = resolve_dataset(dataset, classes, eval_dir)
    metrics = evaluate(model, eval_dir, eval_split, batch_size, workers, device, progress)
    model.cpu()
    metrics['dataset'] = dataset
    metrics['dataset_name'] = dataset_name
    info['checkpoint_file'] = pathlib.Path(checkpoint).name
    name = repo_id.split('/')[-1] if repo_id else info['architecture']
    card = model_card(name, model, metrics, info, repo_id, train_command)
    # written and verified beside out_dir after the (long) evaluation, then swapped in whole: a failure leaves it
    with replaced_folder(out) as staging:
        save_for_hf(model, staging, model_config={'label_names': classes}, safe_serialization=True)
        # safetensors writes its file private (0600); give it the permissions open() gave config.json (the umask's)
        os.chmod(staging / 'model.safetensors', (staging / 'config.json').stat().st_mode & 0o777)
        (staging / 'README.md').write_text(card)
        verify_folder(staging)
    return metrics


def _check_training_classes(train_args: Dict[str, Any], classes: List[str], where: str) -> None:
    """When the run's training ImageFolder is still there, its classes must be the evaluated ones."""
    if not train_args.get('data_dir') or train_args.get('dataset'):
        return
    folder = pathlib.Path(train_args['data_dir']) / (train_args.get('train_split') or 'train')
    trained = sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
    if trained and trained != list(classes):
        raise ValueError(
            f'{where} classes {short(classes)} are not those the model was trained on ({folder}: {short(trained)}): '
            'evaluate on its dataset'
        )


def check_hub_id(name: str, value, what: str, slashes: Tuple[int, ...] = (1,)) -> None:
    """ValueError naming ``name`` unless ``value`` is an id huggingface_hub accepts (letters, digits, ``-_.``) with
    one of ``slashes`` slashes: text the card shows and the Hub resolves, so nothing else may go into it."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id
    try:
        validate_repo_id(value)  # refuses a non-str, None excepted (str(None) has no slash)
        if str(value).count('/') not in slashes:
            raise HFValidationError(f'it has {str(value).count("/")} slashes')
    except HFValidationError as e:
        raise ValueError(f'{name} {value!r} is not {what} ({e})') from None


# ---- publish ------------------------------------------------------------------------------------
def publish(folder: str, repo_id: str, private: bool = False, dry_run: bool = False,
            commit_message: str = 'Add timm_odevit model') -> List[str]:
    """Upload a verified folder with huggingface_hub. The token comes from HF_TOKEN or `hf auth login`
    and is never printed or written. Returns the uploaded file names."""
    check_hub_id('--repo-id', repo_id, REPO_ID)
    verify_folder(folder)
    files = sorted(p.name for p in pathlib.Path(folder).iterdir() if p.is_file())
    if dry_run:
        return files
    from huggingface_hub import HfApi
    api = HfApi()
    api.create_repo(repo_id, private=private, exist_ok=True)
    api.upload_folder(folder_path=folder, repo_id=repo_id, commit_message=commit_message)
    return files


# ---- command line -------------------------------------------------------------------------------
CLI_ERRORS = (ValueError, KeyError, TypeError, OSError, RuntimeError)


def _message(e: BaseException) -> str:
    if isinstance(e, KeyError) and e.args and isinstance(e.args[0], str):
        return e.args[0]
    return str(e) or repr(e)


def export_parser() -> argparse.ArgumentParser:
    """odevit-export's command line."""
    p = argparse.ArgumentParser(
        prog='odevit-export',
        description='Export a train.py checkpoint as a Hugging Face Hub model folder: weights, config.json and a '
        'model card whose accuracy is measured here on --eval-dir/--eval-split.',
    )
    p.add_argument('checkpoint', help='train.py checkpoint (model_best.pth.tar / last.pth.tar of a run folder)')
    p.add_argument('out_dir', help='folder to write (new, empty, or an earlier export, which is replaced)')
    weights = p.add_mutually_exclusive_group()
    weights.add_argument(
        '--ema',
        dest='use_ema',
        action='store_true',
        default=None,
        help='export the EMA weights (default: the weights the run selected on: EMA with --model-ema)',
    )
    weights.add_argument('--raw', dest='use_ema', action='store_false', help='export the raw (non-EMA) weights')
    p.add_argument(
        '--eval-dir',
        required=True,
        help="ImageFolder root (DIR/SPLIT/<class>/<image>) to measure the model-card accuracy on; its classes must "
        "be the model's",
    )
    p.add_argument('--eval-split', default='test', help='split folder of --eval-dir to evaluate (default: test)')
    p.add_argument('--repo-id', help='ORG/NAME the folder will be published as (goes into the card)')
    p.add_argument(
        '--dataset',
        help='Hub dataset id for the card (default: recognised from the evaluated classes, e.g. cifar10, else the '
        '--eval-dir folder name); checked against the classes',
    )
    p.add_argument('--train-command', help='the training command line, quoted in the card')
    p.add_argument('--device', default='cpu', help='device to evaluate on (cpu, cuda, cuda:1, ...)')
    p.add_argument('--batch-size', type=int, default=250, help='evaluation batch size (default: 250)')
    p.add_argument('--workers', type=int, default=2, help='data loading processes (default: 2)')
    return p


def export_main(argv=None) -> None:
    p = export_parser()
    args = p.parse_args(argv)
    try:
        torch.device(args.device)
    except RuntimeError as e:
        p.error(f'--device {args.device!r}: {e}')
    try:
        metrics = export(**vars(args), progress=True)  # the flags' dests are export's parameters
    except CLI_ERRORS as e:
        p.error(_message(e))
    print(json.dumps({k: v for k, v in metrics.items() if k != 'classes'}))


def publish_parser() -> argparse.ArgumentParser:
    """odevit-publish's command line."""
    p = argparse.ArgumentParser(
        prog='odevit-publish',
        description='Verify an exported model folder and upload it to the Hugging Face Hub.',
    )
    p.add_argument('folder', help='folder written by odevit-export')
    p.add_argument('--repo-id', required=True, help='ORG/NAME of the Hub model repository (created if missing)')
    p.add_argument('--private', action='store_true', help='create the repository as private')
    p.add_argument('--dry-run', action='store_true', help='verify and list what would be uploaded, upload nothing')
    return p


def publish_main(argv=None) -> None:
    p = publish_parser()
    args = p.parse_args(argv)
    try:
        files = publish(**vars(args))
    except CLI_ERRORS as e:
        p.error(_message(e))
    done = 'would upload' if args.dry_run else 'uploaded'
    print(f'{done} {", ".join(files)} to {args.repo_id}')


if __name__ == '__main__':
    export_main()
