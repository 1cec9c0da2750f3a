"""The released checkpoints in release/: every loading path gives the exported model's logits,
and the model card's accuracy is what the weights measure on the full CIFAR-10 test set."""
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
    card = (folder / 'README.md').read_text()
    assert 'library_name: timm' in card and 'model-index:' in card
    images = int(re.search(r'\(([0-9,]+) test images', card).group(1).replace(',', ''))
    assert images == 10000
    # the model-index metric, keys in either order (huggingface_hub's EvalResult writes value before name)
    m = (re.search(r'name: Top-1 accuracy\n\s+value: ([0-9.]+)', card)
         or re.search(r'value: ([0-9.]+)\n\s+name: Top-1 accuracy\n', card))
    return float(m.group(1))


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
