"""The released checkpoints in release/: every loading path gives the exported model's logits,
and the model card's accuracy is what the weights measure on the full CIFAR-10 test set."""
import json
import pathlib
import re

import pytest
import timm
import torch

import timm_odevit  # noqa: F401
from timm_odevit import hub

ROOT = pathlib.Path(__file__).resolve().parents[1]
CIFAR = ROOT.parent / 'shared' / 'data' / 'cifar10'
RELEASES = sorted(p.parent for p in (ROOT / 'release').glob('*/config.json'))


def test_releases_exist():
    assert {p.name for p in RELEASES} >= {'odevit_tiny_cifar.c10', 'bvit_tiny_cifar.c10'}


@pytest.mark.parametrize('folder', RELEASES, ids=lambda p: p.name)
def test_every_loading_path_gives_the_same_logits(folder):
    repo_id = timm.models.get_pretrained_cfg(folder.name).hf_hub_id
    hub.verify_folder(folder)
    x = torch.randn(2, 3, 32, 32)
    models = {
        'local-dir': timm.create_model(f'local-dir:{folder}', pretrained=True),
        'hf-hub': timm.create_model(f'hf-hub:{repo_id}', pretrained=True),   # offline, from the session cache
        'registered tag': timm.create_model(folder.name, pretrained=True),  # default_cfgs file= (packaged)
    }
    with torch.no_grad():
        logits = {k: m.eval()(x) for k, m in models.items()}
    for k in ('hf-hub', 'registered tag'):
        torch.testing.assert_close(logits[k], logits['local-dir'], msg=k)
    assert models['registered tag'].nfe == models['local-dir'].nfe  # trained solver settings come with the tag


def _card_top1(folder: pathlib.Path) -> float:
    """The card's model-index top-1, as huggingface_hub reads it; measured on the release's 10,000 test images."""
    from huggingface_hub import ModelCard
    data = ModelCard.load(folder / 'README.md').data
    assert data.library_name == 'timm' and json.loads((folder / 'record.json').read_text())['test']['images'] == 10000
    return next(r.metric_value for r in data.eval_results if r.metric_name == 'Top-1 accuracy')


def test_model_card_accuracies_are_reproduced():
    """Every release's card accuracy, measured again on the full test set (one pass over the images)."""
    cards = {folder.name: _card_top1(folder) for folder in RELEASES}
    if not CIFAR.is_dir():
        pytest.skip(f'{CIFAR} not found')
    models = {folder.name: timm.create_model(f'local-dir:{folder}', pretrained=True) for folder in RELEASES}
    measured = hub.evaluate_together(models, str(CIFAR), 'test')
    for name, top1 in cards.items():
        assert measured[name]['images'] == 10000 and f"{measured[name]['top1']:.2f}" == f'{top1:.2f}', name


@pytest.mark.parametrize('folder', RELEASES, ids=lambda p: p.name)
def test_every_code_block_of_the_card_runs_as_written(folder):
    blocks = re.findall(r'```python\n(.*?)```', (folder / 'README.md').read_text(), re.S)
    assert blocks
    for code in blocks:  # hf-hub: loads come from the session's offline cache (conftest)
        exec(compile(code, f'{folder.name}/README.md', 'exec'), {})
