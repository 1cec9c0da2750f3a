"""The released checkpoints in release/: every loading path gives the exported model's logits, and the model card's
accuracy is what the weights predict on the full CIFAR-10 test set (recorded per image, re-predicted on a sample)."""
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
RELEASES = sorted(p.parent for p in (ROOT / 'release').glob('*/record.json'))
# model folders that are not (yet) releases of a registered tag: the distillation teacher's warm-restart cycles
FOLDERS = sorted(p.parent for p in (ROOT / 'release').glob('*/config.json') if p.parent not in RELEASES)
# record-only folders: superseded teacher cycles whose weights left the tree and stay in git history (each card's top
# note gives the `git show` commands); their cards headline a test top-1 too, from recorded predictions
RECORDS = sorted(p.parent for p in (ROOT / 'release').glob('*/README.md') if p.parent not in RELEASES + FOLDERS)
CARDS = RELEASES + FOLDERS + RECORDS


def test_releases_exist():
    assert {p.name for p in RELEASES} >= {'odevit_tiny_cifar.c10', 'bvit_tiny_cifar.c10',
                                          'odevit_tiny_convstem_cifar.c10_pnp'}


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
    assert models['registered tag'].blocks.nfe == models['local-dir'].blocks.nfe  # trained solver settings come with it


def test_every_folder_of_release_has_a_checked_card():
    assert {p for p in (ROOT / 'release').iterdir() if p.is_dir()} == set(CARDS)
    assert {p.name for p in RECORDS} >= {f'teacher_convstem_cifar10_cycle{i}' for i in range(5)}


# the test top-1 a card states in its text: '**80.75 ± 0.77 %** top-1 (95 % binomial interval; 98.50 % top-5) on all
# 10,000 test images' (the only number of a card without a model-index, the headline's source in the others')
STATED_TEST_TOP1 = re.compile(r'\s+'.join((
    r'\*\*(\d+\.\d\d)', '±', r'\d+\.\d\d', r'%\*\*', 'top-1', r'\(95', '%', 'binomial', 'interval;', r'\d+\.\d\d',
    '%', r'top-5\)', 'on', 'all', '10,000', 'test', 'images')))


def _card_top1(folder: pathlib.Path) -> float:
    """The card's headline top-1: its model-index top-1 as huggingface_hub reads it, or, for a record-only card with
    no model-index, the test top-1 its text states. The headline of every card is its top-1 on the 10,000 test images
    (a release's record.json says so too; a model-index names the split test), and the card cites the papers."""
    from huggingface_hub import ModelCard
    text = (folder / 'README.md').read_text()
    assert '## Citation' in text and '```bibtex' in text
    stated = [float(m) for m in STATED_TEST_TOP1.findall(text)]
    if not text.startswith('---\n'):  # no model-index (teacher cycles 0-1): the text states the test top-1
        assert folder in RECORDS and len(stated) == 1, f'{folder.name}: no model-index and {len(stated)} test top-1s'
        return stated[0]
    data = ModelCard.load(folder / 'README.md').data
    assert data.library_name == 'timm' and {r.dataset_split for r in data.eval_results} == {'test'}
    if (folder / 'record.json').exists():
        assert json.loads((folder / 'record.json').read_text())['test']['images'] == 10000
    top1 = next(r.metric_value for r in data.eval_results if r.metric_name == 'Top-1 accuracy')
    assert all(f'{s:.2f}' == f'{top1:.2f}' for s in stated), \
        f'{folder.name}: the text says {stated}, the headline {top1}'
    return top1


def _weights(folder: pathlib.Path, tmp_path: pathlib.Path) -> pathlib.Path:
    """A folder with the card's weights and config.json: the card's own, or, for a record-only card, the files its
    top note's `git show SHA:PATH > FILE` commands restore from git history (skipped where the history is absent)."""
    import subprocess
    if (folder / 'model.safetensors').exists():
        return folder
    note = ' '.join(line[2:] for line in (folder / 'README.md').read_text().splitlines() if line.startswith('> '))
    restore = {f: (sha, path) for sha, path, f in re.findall(r'git show ([0-9a-f]{7,40}):(\S+) > ([\w.]+)`', note)}
    assert set(restore) == {'model.safetensors', 'config.json'}, f'{folder.name}: its top note restores {set(restore)}'
    for name, (sha, path) in restore.items():
        got = subprocess.run(['git', '-C', str(ROOT), 'show', f'{sha}:{path}'], capture_output=True)
        if got.returncode:
            pytest.skip(f'{sha}:{path} is not in this checkout\'s git history ({got.stderr.decode().strip()})')
        (tmp_path / name).write_bytes(got.stdout)
    return tmp_path


SAMPLE_PER_CLASS = 100  # re-predicted images per class (all 10,000: 9 min on one core, the weights' own cost)


@pytest.mark.parametrize('folder', CARDS, ids=lambda p: p.name)
def test_model_card_accuracy_is_what_the_weights_predict(folder, tmp_path):
    """The card's top-1 is what the folder's recorded per-image predictions score against the labels of all 10,000
    test images, and the weights predict those same classes again on a sample of them (100 per class, seeded). The
    model folders beside the releases (the distillation teacher) headline their test top-1 too, not a held-out one;
    so do the record-only cycles, whose weights are restored from git history as their cards say."""
    import random
    from timm.data import resolve_data_config
    from timm_odevit.data import image_folder
    from timm_odevit.loader import CheckedImages, eval_transform
    recorded = json.loads((folder / 'test_predictions.json').read_text())
    if not CIFAR.is_dir():
        pytest.skip(f'{CIFAR} not found')
    classes, samples = image_folder(CIFAR, 'test')
    assert recorded['classes'] == classes and recorded['images'] == len(samples) == 10000
    correct = sum(p == t for p, (_, t) in zip(recorded['predicted'], samples))
    assert recorded['split'] == 'test' and (folder / 'test_predictions.json').stat().st_size < 64_000
    assert f'{100 * correct / len(samples):.2f}' == f'{_card_top1(folder):.2f}'
    rng = random.Random(0)
    sample = sorted(i for c in range(len(classes)) for i in rng.sample(
        [i for i, (_, t) in enumerate(samples) if t == c], SAMPLE_PER_CLASS))
    model = timm.create_model(f'local-dir:{_weights(folder, tmp_path)}', pretrained=True).eval()
    transform, mode = eval_transform(resolve_data_config(model=model))
    loader = torch.utils.data.DataLoader(CheckedImages([samples[i] for i in sample], transform, mode), batch_size=250)
    with torch.no_grad():
        predicted = [p for x, _ in loader for p in model(x).argmax(-1).tolist()]
    differ = [i for i, p in zip(sample, predicted) if p != recorded['predicted'][i]]
    assert len(differ) <= 2, f'{len(differ)} of {len(sample)} images predicted otherwise: {differ[:10]}'  # near-ties


@pytest.mark.parametrize('folder', RELEASES, ids=lambda p: p.name)
def test_every_code_block_of_the_card_runs_as_written(folder):
    blocks = re.findall(r'```python\n(.*?)```', (folder / 'README.md').read_text(), re.S)
    assert blocks
    for code in blocks:  # hf-hub: loads come from the session's offline cache (conftest)
        exec(compile(code, f'{folder.name}/README.md', 'exec'), {})


@pytest.mark.parametrize('folder', FOLDERS, ids=lambda p: p.name)
def test_other_model_folders_load_through_local_dir_as_their_cards_say(folder):
    """A model folder beside the releases (the teacher's latest cycle) is complete, loads as ``local-dir:`` with the
    preprocessing it was trained with, and its card's code runs with the folder's path in place of PATH."""
    hub.verify_folder(folder)
    model = timm.create_model(f'local-dir:{folder}', pretrained=True)
    assert model.pretrained_cfg['input_size'] == (3, 32, 32) or list(model.pretrained_cfg['input_size']) == [3, 32, 32]
    for code in re.findall(r'```python\n(.*?)```', (folder / 'README.md').read_text(), re.S):
        exec(compile(code.replace('local-dir:PATH', f'local-dir:{folder}'), f'{folder.name}/README.md', 'exec'), {})


@pytest.mark.parametrize('folder', RELEASES + FOLDERS, ids=lambda p: p.name)
def test_model_card_gmacs_is_what_the_model_counts(folder):
    from tools.card_extras import gmacs
    stated = re.search(r'^\| GMACs \| ([\d.]+) \|$', (folder / 'README.md').read_text(), re.M)
    model = timm.create_model(f'local-dir:{folder}', pretrained=False)
    assert stated and float(stated.group(1)) == round(gmacs(model), 3)
