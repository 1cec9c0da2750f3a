"""Export / load / publish in timm's Hugging Face format, through timm's real hub code, offline."""
import argparse
import json
import os
import pathlib
import re
import shutil

import huggingface_hub
import pytest
import timm
import torch
from safetensors.torch import load_file, save_file

import timm_odevit  # noqa: F401
from timm_odevit import checkpoint, hub
from _hf_cache import install_in_hf_cache

CIFAR = pathlib.Path(__file__).resolve().parents[1].parent / 'shared' / 'data' / 'cifar10'


@pytest.fixture(scope='module')
def eval_dir(tmp_path_factory):
    if not CIFAR.is_dir():
        pytest.skip(f'CIFAR-10 ImageFolder not found at {CIFAR}')
    root = tmp_path_factory.mktemp('cifar_eval')
    for c in sorted(os.listdir(CIFAR / 'test')):
        (root / 'test' / c).mkdir(parents=True)
        for f in sorted(os.listdir(CIFAR / 'test' / c))[:3]:
            shutil.copy(CIFAR / 'test' / c / f, root / 'test' / c / f)
    return root


@pytest.fixture(scope='module')
def exported(tmp_path_factory, eval_dir):
    """A train.py-style checkpoint (trained with rk4, 3 steps) exported to a Hub folder."""
    tmp = tmp_path_factory.mktemp('export')
    torch.manual_seed(0)
    model = timm.create_model('odevit_tiny_cifar', solver='rk4', steps=3)
    args = argparse.Namespace(model='odevit_tiny_cifar', model_kwargs={'solver': 'rk4', 'steps': 3}, epochs=1, lr=1e-3,
                              color_jitter=0.0, mixup=0.0, model_ema=False, model_ema_decay=0.999)
    torch.save({'arch': 'odevit_tiny_cifar', 'args': args, 'epoch': 0, 'state_dict': model.state_dict()},
               tmp / 'last.pth.tar')
    (tmp / 'summary.csv').write_text('epoch,train_loss,eval_loss,eval_top1,eval_top5,lr\n'
                                     '0,2.2,2.1,21.5,70.0,0.001\n1,2.0,1.9,30.25,80.0,0.0005\n')
    (tmp / 'train_time.json').write_text(json.dumps({'epochs': {'0': 1800.0, '1': 1800.0}, 'seconds': 3600.0,
                                                     'hardware': 'Test CPU, 2 CPU cores, 2 threads'}))
    folder = tmp / 'odevit_tiny_cifar.test'
    metrics = hub.export(str(tmp / 'last.pth.tar'), str(folder), eval_dir=str(eval_dir),
                         repo_id='timm-odevit/odevit_tiny_cifar.test')
    return folder, model.eval(), metrics


def test_export_writes_timm_hub_format(exported):
    folder, model, metrics = exported
    assert {p.name for p in folder.iterdir()} >= {'config.json', 'model.safetensors', 'README.md'}
    config = json.loads((folder / 'config.json').read_text())
    assert config['architecture'] == 'odevit_tiny_cifar' and config['num_classes'] == 10
    assert config['model_args']['solver'] == 'rk4' and config['model_args']['steps'] == 3
    cfg = config['pretrained_cfg']
    assert tuple(cfg['mean']) == pytest.approx((0.4914, 0.4822, 0.4465)) and cfg['input_size'] == [3, 32, 32]
    card = (folder / 'README.md').read_text()
    assert card.startswith('---\n') and 'library_name: timm' in card and 'model-index:' in card
    assert metrics['images'] == 30 and metrics['nfe'] == 12
    # the model-index carries the measured top-1 (read as YAML: 20.0 prints as "20.0", not "20.00")
    results = huggingface_hub.metadata_load(folder / 'README.md')['model-index'][0]['results'][0]['metrics']
    assert {m['name']: m['value'] for m in results}['Top-1 accuracy'] == round(metrics['top1'], 2)


def test_model_card_accuracy_is_measured(exported, eval_dir):
    folder, model, metrics = exported
    again = hub.evaluate(timm.create_model(f'local-dir:{folder}', pretrained=True), str(eval_dir))
    assert again['top1'] == metrics['top1']


def _same_logits(a, b):
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(a.eval()(x), b.eval()(x))


def test_local_dir_loads_weights_and_solver(exported):
    folder, model, _ = exported
    loaded = timm.create_model(f'local-dir:{folder}', pretrained=True)
    assert loaded.solver.method == 'rk4' and loaded.solver.steps == 3
    _same_logits(loaded, model)


def test_hf_hub_path_offline_from_the_cache(exported):
    folder, model, _ = exported
    install_in_hf_cache(folder, 'timm-odevit/odevit_tiny_cifar.test')
    assert os.environ['HF_HUB_OFFLINE'] == '1'
    _same_logits(timm.create_model('hf-hub:timm-odevit/odevit_tiny_cifar.test', pretrained=True), model)
    # a registered name whose pretrained_cfg carries the hf_hub_id goes through the same download code
    registered = timm.create_model('odevit_tiny_cifar', pretrained=True, solver='rk4', steps=3,
                                   pretrained_cfg_overlay=dict(hf_hub_id='timm-odevit/odevit_tiny_cifar.test', file=None))
    _same_logits(registered, model)


def test_head_adaptation(exported):
    folder, model, _ = exported
    five = timm.create_model(f'local-dir:{folder}', pretrained=True, num_classes=5)
    assert five.get_classifier().out_features == 5
    torch.testing.assert_close(five.field.attn.qkv.weight, model.field.attn.qkv.weight)
    assert timm.create_model(f'local-dir:{folder}', pretrained=True, num_classes=0)(torch.randn(1, 3, 32, 32)).shape == (1, 256)


def test_other_solver_configuration_still_loads(exported):
    folder, model, _ = exported
    euler = timm.create_model(f'local-dir:{folder}', pretrained=True, solver='euler', steps=24)
    torch.testing.assert_close(euler.state_dict()['blocks.0.field.mlp.fc1.weight'], model.state_dict()['blocks.0.field.mlp.fc1.weight'])
    assert euler.solver.method == 'euler'


def _copy(folder, tmp_path):
    bad = tmp_path / 'bad'
    shutil.copytree(folder, bad)
    return bad


def test_truncated_safetensors(exported, tmp_path):
    bad = _copy(exported[0], tmp_path)
    data = (bad / 'model.safetensors').read_bytes()
    (bad / 'model.safetensors').write_bytes(data[:len(data) // 2])
    with pytest.raises(ValueError, match='corrupt or truncated'):
        hub.verify_folder(bad)
    with pytest.raises(Exception, match='(?i)deserializ|incomplete|invalid|header'):
        timm.create_model(f'local-dir:{bad}', pretrained=True)


def test_config_naming_another_architecture(exported, tmp_path):
    bad = _copy(exported[0], tmp_path)
    config = json.loads((bad / 'config.json').read_text())
    config['architecture'] = 'bvit_tiny_cifar'
    config['model_args'] = {}
    (bad / 'config.json').write_text(json.dumps(config))
    with pytest.raises(ValueError, match='does not match BViT.*missing keys'):
        timm.create_model(f'local-dir:{bad}', pretrained=True)


def test_missing_and_extra_keys(exported, tmp_path):
    bad = _copy(exported[0], tmp_path)
    state = load_file(str(bad / 'model.safetensors'))
    state.pop('blocks.0.field.norm_attn.weight')
    state['blocks.0.field.extra'] = torch.zeros(3)
    save_file(state, str(bad / 'model.safetensors'))
    with pytest.raises(ValueError, match=r"1 missing keys \['blocks.0.field.norm_attn.weight'\].*unexpected keys"):
        timm.create_model(f'local-dir:{bad}', pretrained=True)


def test_shape_mismatch(exported, tmp_path):
    with pytest.raises(ValueError, match='shape mismatches'):
        timm.create_model(f'local-dir:{exported[0]}', pretrained=True, mlp_ratio=4.)


def test_export_errors(tmp_path, eval_dir):
    with pytest.raises(FileNotFoundError):
        hub.export(str(tmp_path / 'nope.pth.tar'), str(tmp_path / 'out'), eval_dir=str(eval_dir))
    model = timm.create_model('odevit_tiny_cifar', steps=2)
    torch.save({'arch': 'odevit_tiny_cifar', 'state_dict': model.state_dict()}, tmp_path / 'c.pth.tar')
    with pytest.raises(KeyError, match='state_dict_ema.*--model-ema'):
        hub.export(str(tmp_path / 'c.pth.tar'), str(tmp_path / 'out'), use_ema=True, eval_dir=str(eval_dir))
    torch.save({'arch': 'bvit_tiny_cifar', 'state_dict': model.state_dict()}, tmp_path / 'd.pth.tar')
    with pytest.raises(ValueError, match='does not match BViT'):
        hub.export(str(tmp_path / 'd.pth.tar'), str(tmp_path / 'out'), eval_dir=str(eval_dir))


def test_publish_dry_run_never_shows_the_token(exported, monkeypatch, capsys):
    monkeypatch.setenv('HF_TOKEN', 'hf_secret_value_123')
    hub.publish_main([str(exported[0]), '--repo-id', 'timm-odevit/odevit_tiny_cifar.test', '--dry-run'])
    out = capsys.readouterr()
    assert 'would upload README.md, config.json, model.safetensors to' in out.out
    assert 'hf_secret_value_123' not in out.out + out.err


def test_export_that_fails_leaves_no_half_written_folder(tmp_path, eval_dir, monkeypatch):
    model = timm.create_model('odevit_tiny_cifar', steps=2)
    torch.save({'arch': 'odevit_tiny_cifar', 'state_dict': model.state_dict()}, tmp_path / 'c.pth.tar')
    out = tmp_path / 'out'

    def broken_evaluation(*args, **kwargs):
        raise RuntimeError('evaluation failed (simulated)')
    monkeypatch.setattr(hub, 'evaluate', broken_evaluation)
    with pytest.raises(RuntimeError, match='simulated'):
        hub.export(str(tmp_path / 'c.pth.tar'), str(out), eval_dir=str(eval_dir))
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ['c.pth.tar']
    out.mkdir()  # an existing folder keeps its content when a re-export fails
    (out / 'config.json').write_text('{"previous": true}')
    with pytest.raises(RuntimeError, match='simulated'):
        hub.export(str(tmp_path / 'c.pth.tar'), str(out), eval_dir=str(eval_dir))
    assert [p.name for p in out.iterdir()] == ['config.json'] and 'previous' in (out / 'config.json').read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ['c.pth.tar', 'out']


def test_verify_folder_refuses_bad_values_and_bad_config(exported, tmp_path):
    folder = tmp_path / 'copy'
    shutil.copytree(exported[0], folder)
    state = load_file(folder / 'model.safetensors')
    state['head.weight'][0, 0] = float('nan')
    save_file(state, folder / 'model.safetensors')
    with pytest.raises(ValueError, match=r'NaN/Inf in 1 tensors'):
        hub.verify_folder(folder)
    state['head.weight'] = state['head.weight'].nan_to_num().long()
    save_file(state, folder / 'model.safetensors')
    with pytest.raises(ValueError, match='integer tensors for floating-point parameters'):
        hub.verify_folder(folder)
    (folder / 'config.json').write_text('[1, 2]')
    with pytest.raises(ValueError, match=r'config.json holds a JSON list, not a dict'):
        hub.verify_folder(folder)


def test_card_carries_details_labels_curve_and_citation(exported):
    folder, model, metrics = exported
    config = json.loads((folder / 'config.json').read_text())
    assert config['label_names'] == ['airplane', 'automobile', 'bird', 'cat', 'deer', 'dog', 'frog', 'horse', 'ship',
                                     'truck']
    assert timm.create_model(f'local-dir:{folder}', pretrained=True).pretrained_cfg['label_names'][3] == 'cat'
    card = (folder / 'README.md').read_text()
    assert 'pipeline_tag: image-classification' in card and 'license: apache-2.0' in card
    for row in ('| parameters |', '| image size | 32 × 32 |', '| depth | rk4, 3 steps', '| epochs | 1 |'):
        assert row in card, row
    assert '@misc{boned2025odevit' in card and 'eprint = {2511.16501}' in card
    assert 'GMACs' not in card and 'summary.csv' not in card  # a release's extras (tools/card_extras.py)


def test_a_releases_card_extras(exported, tmp_path):
    """tools/card_extras.py adds to an exported folder what a release's card also gives: GMACs, hardware, wall
    time, the recipe line and the run's summary.csv drawn as a learning curve."""
    from tools.card_extras import extend_card
    folder = tmp_path / exported[0].name
    shutil.copytree(exported[0], folder)
    args = {'epochs': 1, 'lr': 1e-3, 'color_jitter': 0.0, 'mixup': 0.0, 'model_ema': False, 'model_ema_decay': 0.999}
    extend_card(folder, exported[0].parent, args)
    card = (folder / 'README.md').read_text()
    for row in ('| parameters |', '| GMACs |', '| image size | 32 × 32 |',
                '| training hardware | Test CPU, 2 CPU cores, 2 threads |', '| training wall time | 1.0 h (2 epochs'):
        assert row in card, row
    assert card.index('| parameters |') < card.index('| GMACs |') < card.index('| image size |')
    assert card.index('| training wall time |') < card.index('| top-1 ')
    assert '![validation top-1 per epoch](learning_curve.png)' in card
    assert '[summary.csv](summary.csv)' in card  # the run's per-epoch record is in the folder, as train.py wrote it
    assert (folder / 'summary.csv').read_text().splitlines()[2].startswith('1,2.0,1.9,30.25')
    recipe = re.search(r'Training: timm train.py.*?\n\((.*?)\)', card, re.S).group(1)
    assert 'color_jitter=0.0' in recipe and 'mixup' not in recipe and 'model_ema' not in recipe, recipe
    from PIL import Image
    with Image.open(folder / 'learning_curve.png') as img:
        assert img.size[0] > 300
    assert card.index('## Learning curve') < card.index('## Citation')
    hub.verify_folder(folder)


def test_a_packaged_releases_card_loads_the_registered_tag_offline():
    """The exported card of a release whose weights the wheel carries names hf-hub:ORG/TAG (which loads once
    uploaded); the release's extras (tools/card_extras.py) make its code load the registered tag, with no network, and
    say so. Any other card keeps its hf-hub: loads."""
    from timm_odevit.model_card import model_card
    from tools.card_extras import with_extras
    model = timm.create_model('odevit_tiny_cifar.c10', pretrained=True)
    metrics = dict(top1=50., top5=90., images=100, split='test', dataset='cifar10')
    info = dict(architecture='odevit_tiny_cifar')
    card = model_card('odevit_tiny_cifar.c10', model, metrics, info, 'timm-odevit/odevit_tiny_cifar.c10')
    assert card.count("'hf-hub:timm-odevit/odevit_tiny_cifar.c10'") == 3 and 'wheel carries' not in card
    card = with_extras(card, model, {}, {})
    assert 'The wheel carries these weights: `odevit_tiny_cifar.c10` loads them with no network' in card
    blocks = re.findall(r'```python\n(.*?)```', card, re.S)
    assert len(blocks) == 2 and not any('hf-hub:' in code for code in blocks)
    for code in blocks:
        exec(compile(code, 'README.md', 'exec'), {})
    other = model_card('x', model, metrics, info, 'org/odevit_tiny_cifar.test')
    assert with_extras(other, model, {}, {}).count("'hf-hub:org/odevit_tiny_cifar.test'") == 3


@pytest.mark.parametrize('kd, shown, hidden', [
    ({}, [], ['kd_']),  # train.py's kd defaults without a teacher: no distillation ran
    ({'kd_model_name': 'local-dir:teachers/mine', 'kd_distill_type': 'logit'},
     ['kd_model_name=local-dir:teachers/mine', 'kd_distill_type=logit'], ['kd_mapping', 'kd_model_kwargs', 'kd_teacher']),
    ({'kd_model_name': 'vit_small_patch16_224', 'kd_distill_type': 'trajectory', 'kd_mapping': 'arclength',
      'kd_teacher_checkpoint': 'teacher.pth.tar', 'kd_model_kwargs': {'img_size': 32}},
     ['kd_model_name=vit_small_patch16_224', 'kd_distill_type=trajectory', 'kd_mapping=arclength',
      'kd_teacher_checkpoint=teacher.pth.tar', "kd_model_kwargs={'img_size': 32}"], []),
])
def test_card_recipe_names_the_teacher_and_the_mapping(kd, shown, hidden):
    from timm_odevit.model_card import model_card
    from tools.card_extras import with_extras
    args = {'epochs': 2, 'lr': 5e-4, 'kd_model_name': None, 'kd_distill_type': 'logit', 'kd_mapping': 'uniform',
            'kd_teacher_checkpoint': None, 'kd_model_kwargs': {}, **kd}  # train.py's defaults, then the run's
    model = timm.create_model('odevit_tiny_cifar', steps=2)
    card = model_card('odevit_tiny_cifar', model,
                      {'top1': 50., 'top5': 90., 'images': 100, 'split': 'val', 'dataset': 'cifar10'},
                      {'architecture': 'odevit_tiny_cifar', 'train_args': args})
    card = with_extras(card, model, args, {})
    recipe = re.search(r'Training: timm train.py.*?\n\((.*?)\)', card, re.S).group(1)
    assert all(s in recipe for s in shown) and not any(h in recipe for h in hidden), recipe


def _outside_fences(card: str) -> list:
    """The lines of a markdown text outside its fenced code blocks (closed by a fence at least as long, CommonMark)."""
    lines, fence = [], ''
    for line in card.splitlines():
        run = re.match(r'`{3,}', line)
        if not fence and run:
            fence = run.group()
        elif fence and re.fullmatch(r'`{%d,}\s*' % len(fence), line):
            fence = ''
        elif not fence:
            lines.append(line)
    return lines


def test_user_text_cannot_change_the_cards_structure():
    """A '|' split the details row, HTML went in raw, a '# comment' line of a multi-line --train-command became a
    heading: user text is escaped, the command fenced."""
    from timm_odevit.model_card import model_card
    from tools.card_extras import with_extras
    command = 'python -m timm_odevit.train \\\n  --lr 1e-3\n# comment\n| a | b |\n<script>x()</script>\n```'
    plain = dict(top1=50., top5=90., images=100, split='test', dataset='cifar10', dataset_name='CIFAR-10')
    info = dict(architecture='odevit_tiny_cifar', checkpoint_file='a|b<i>.pth.tar', model_kwargs={'note': 'x|y'},
                train_time={'seconds': 3600., 'epochs': {'0': 1.}, 'hardware': 'CPU | <b>fast</b>'},
                train_args={'epochs': 1, 'kd_model_name': 'local-dir:t|<b>', 'kd_distill_type': 'logit'})
    model = timm.create_model('odevit_tiny_cifar', steps=2)
    card = model_card('odevit_tiny_cifar', model, dict(plain, dataset_name='my|data <b>x</b>'), info,
                      train_command=command)
    card = with_extras(card, model, info['train_args'], info['train_time'], 'a|b', curve=True)
    reference = model_card('odevit_tiny_cifar', model, plain, dict(architecture='odevit_tiny_cifar'),
                           train_command='python -m timm_odevit.train')
    reference = with_extras(reference, model, {}, {}, curve=True)
    outside = _outside_fences(card.split('\n---\n', 1)[1])  # the markdown after the front matter (YAML, quoted)
    headings = [line for line in outside if line.startswith('#')]
    assert headings == [line for line in _outside_fences(reference) if line.startswith('#')], headings
    assert not any(re.search(r'(?<!\\)<', line) for line in outside), 'raw HTML'
    table = card.split('## Model details')[1].split('\n\n')[1].splitlines()[2:]
    assert table and all(len(re.split(r'(?<!\\)\|', row)) == 4 for row in table), table  # | key | value |
    assert '````bash\n' + command + '\n````' in card  # every line as written, in a longer fence than it holds


@pytest.mark.parametrize('dataset', ['cifar10|x', '<b>cifar</b>', 'a/b/c', 'my data'])
def test_dataset_must_be_a_hub_dataset_id(dataset):
    with pytest.raises(ValueError, match=rf'--dataset {re.escape(repr(dataset))} is not a Hub dataset id'):
        hub.resolve_dataset(dataset, ['a', 'b'], 'folder')
    assert hub.resolve_dataset('my-org/my_data.v2', ['a', 'b'], 'folder') == ('my-org/my_data.v2', 'my-org/my_data.v2')


def test_cards_of_timms_own_vits_cite_the_vit_paper_and_timm():
    from timm_odevit.model_card import model_card
    metrics = dict(top1=50., top5=90., images=100, split='test', dataset='cifar10')
    vit = timm.create_model('vit_tiny_patch16_224', img_size=32, patch_size=8, depth=2, num_classes=10,
                            pretrained_cfg_overlay=dict(input_size=(3, 32, 32)))
    card = model_card('vit', vit, metrics, dict(architecture='vit_tiny_patch16_224'))
    assert '## Citation' in card and '@inproceedings{dosovitskiy2021vit' in card and '@misc{rw2019timm' in card
    ours = model_card('odevit', timm.create_model('odevit_tiny_cifar', steps=2), metrics, dict(architecture='x'))
    assert '@misc{boned2025odevit' in ours and 'rw2019timm' not in ours and 'dosovitskiy' not in ours


def test_every_code_block_of_the_card_runs_as_written(exported, capsys):
    folder, _, _ = exported
    install_in_hf_cache(folder, 'timm-odevit/odevit_tiny_cifar.test')
    blocks = re.findall(r'```python\n(.*?)```', (folder / 'README.md').read_text(), re.S)
    assert len(blocks) == 2
    for code in blocks:
        exec(compile(code, 'README.md', 'exec'), {})
    out = capsys.readouterr().out
    top5 = re.search(r"\[\('(\w+)', ", out)
    assert top5 and top5.group(1) in json.loads((folder / 'config.json').read_text())['label_names']
    assert 'torch.Size([1, 256])' in out  # the embedding


# ---- loading never unpickles arbitrary objects -------------------------------------------------------------
class _WritesAMarker:
    """Unpickling this runs os.system: what a crafted checkpoint can do under weights_only=False."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f'touch {self.marker}',)


@pytest.mark.parametrize('zipped', [True, False], ids=['zip', 'legacy'])
def test_crafted_checkpoint_is_refused_without_running_anything(tmp_path, capsys, zipped):
    marker = tmp_path / 'ran'
    model = timm.create_model('odevit_tiny_cifar', steps=2)
    crafted = tmp_path / 'crafted.pth.tar'
    torch.save({'arch': 'odevit_tiny_cifar', 'args': _WritesAMarker(marker), 'state_dict': model.state_dict()}, crafted,
               _use_new_zipfile_serialization=zipped)  # torch's legacy format is refused by name too
    with pytest.raises(ValueError, match=r'crafted.pth.tar.*(posix|os)\.system.*refused'):
        hub.model_from_checkpoint(str(crafted))
    with pytest.raises(SystemExit):
        hub.export_main([str(crafted), str(tmp_path / 'out'), '--eval-dir', str(tmp_path)])
    assert re.search(r'odevit-export: error: checkpoint .*crafted.pth.tar.*refused', capsys.readouterr().err)
    assert not marker.exists() and not (tmp_path / 'out').exists()


def test_train_checkpoint_with_its_args_loads_weights_only(tmp_path):
    model = timm.create_model('odevit_tiny_cifar', steps=2)
    args = argparse.Namespace(model='odevit_tiny_cifar', model_kwargs={'steps': 2}, model_ema=False)
    torch.save({'arch': 'odevit_tiny_cifar', 'args': args, 'epoch': 4, 'state_dict': model.state_dict()},
               tmp_path / 'c.pth.tar')
    loaded, info = hub.model_from_checkpoint(str(tmp_path / 'c.pth.tar'))
    assert info['epoch'] == 4 and info['model_kwargs']['steps'] == 2 and not info['ema']
    _same_logits(loaded, model)
    assert argparse.Namespace not in torch.serialization.get_safe_globals()  # allowed for that one load only


@pytest.mark.parametrize('make,words', [
    (lambda p: p.mkdir(), 'is a directory'),
    (lambda p: None, 'does not exist'),
    (lambda p: p.write_bytes(b'PK\x03\x04 truncated'), 'not a readable PyTorch checkpoint'),
])
def test_unreadable_checkpoints_name_the_file(tmp_path, make, words):
    path = tmp_path / 'c.pth.tar'
    make(path)
    with pytest.raises((ValueError, OSError), match=f'{path}.*{words}|{words}'):
        checkpoint.load_checkpoint_file(path)


def test_a_releases_card_gives_the_other_depths(tmp_path, eval_dir):
    """A release's card (tools.cycle): top-1 at each depth on the exported card's images (evaluate_grids), as a table
    placed by tools/card_extras.with_depths; the model's grid is restored."""
    from timm_odevit.evaluation import evaluate_grids
    from tools.card_extras import with_depths
    torch.manual_seed(0)
    model = timm.create_model('odevit_tiny_cifar', steps=3)
    torch.save({'arch': 'odevit_tiny_cifar', 'args': argparse.Namespace(model_kwargs={'steps': 3}),
                'state_dict': model.state_dict()}, tmp_path / 'c.pth.tar')
    metrics = hub.export(str(tmp_path / 'c.pth.tar'), str(tmp_path / 'out'), eval_dir=str(eval_dir))
    card = (tmp_path / 'out' / 'README.md').read_text()
    assert '## Accuracy at other depths' not in card and 'measure first (timm_odevit.anytime' in card
    loaded = timm.create_model(f'local-dir:{tmp_path / "out"}', pretrained=True)
    metrics['grids'] = evaluate_grids(loaded, str(eval_dir), grids=[2, 3, 6])
    assert [(g['depth'], g['nfe']) for g in metrics['grids']] == [(2, 2), (3, 3), (6, 6)]
    at3 = next(g for g in metrics['grids'] if g['depth'] == 3)
    assert at3['top1'] == pytest.approx(metrics['top1'])  # the trained grid, measured twice: the same number
    card = with_depths(card, loaded, metrics, {'model_kwargs': {'steps': 3}})
    half = 196 * (at3['top1'] / 100 * (1 - at3['top1'] / 100) / metrics['images']) ** .5  # the 95 % binomial interval
    assert '## Accuracy at other depths' in card and f"| 3 (trained) | 3 | {at3['top1']:.2f} ± {half:.2f} |" in card
    assert 'see "Accuracy at other depths"' in card and 'measure first' not in card
    assert card.index('## Accuracy at other depths') < card.index('## Citation')
    assert loaded.solver.steps == 3  # the sweep left the model's grid as it was
    recurrent = timm.create_model('bvit_tiny_cifar', iterations=4)
    rows = evaluate_grids(recurrent, str(eval_dir), grids=[2, 4])
    assert [g['nfe'] for g in rows] == [2, 4] and recurrent.iterations == 4
    for bad in ([0], [], 'x', [2.5], [True]):
        with pytest.raises(ValueError, match='grids must be positive integers'):
            evaluate_grids(loaded, str(eval_dir), grids=bad)
    with pytest.raises(TypeError, match='has no ODE trajectory'):
        evaluate_grids(timm.create_model('vit_odevit_tiny_cifar_params_matched'), str(eval_dir), grids=[2])


@pytest.mark.parametrize('kwargs,says', [
    ({}, 'the weights were trained and are loaded at 4'),
    ({'stages': [2, 4]}, 'trained with a loss at iterations 2, 4 (deep supervision) and are loaded at 4'),
])
def test_card_depth_table_says_how_a_recurrent_model_was_trained(kwargs, says):
    from tools.card_extras import depth_section
    model = timm.create_model('bvit_tiny_cifar', iterations=4, **kwargs)
    rows = [{'depth': d, 'nfe': d, 'top1': 50.0} for d in (2, 4, 8)]
    section = depth_section(model, {'grids': rows, 'images': 10, 'split': 'test'})
    assert says in section
    assert ('| 4 (loaded) |' if kwargs else '| 4 (trained) |') in section
    assert '| 50.00 ± 30.99 |' in section and 'top-1 (95 % binomial interval)' in section  # 1.96·√(.25 / 10)


def test_weights_loaded_by_path_on_another_grid_than_their_config_json_are_warned_about(tmp_path, capsys):
    """Depth settings are model kwargs, not weights: weights loaded by path (validate.py --checkpoint, train.py
    --initial-checkpoint) into a model on another grid (time points) than their config.json's are told so; the same
    grid given by other arguments is not, nor is a config.json that leaves out a default."""
    from timm.models import load_checkpoint
    from timm_odevit.cli.train import checked_load_checkpoint
    release = pathlib.Path(__file__).resolve().parents[1] / 'release'
    weights = release / 'odevit_tiny_cifar.c10' / 'model.safetensors'
    warning = checkpoint.depth_mismatch(timm.create_model('odevit_tiny_cifar'), weights)
    assert '6 euler steps to t=1' in warning and '12 euler steps to t=1' in warning and '--model local-dir:' in warning
    for same_grid in (dict(steps=6), dict(steps=6, check_finite=False), dict(step_size=1 / 6)):
        assert checkpoint.depth_mismatch(timm.create_model('odevit_tiny_cifar', **same_grid), weights) == '', same_grid
    assert checkpoint.depth_mismatch(timm.create_model('odevit_tiny_cifar', steps=6, solver='rk4'), weights) != ''
    bvit = release / 'bvit_tiny_cifar.c10' / 'model.safetensors'  # its config.json leaves out iterations=12
    assert '12 recurrence steps to t=12' in checkpoint.depth_mismatch(timm.create_model('bvit_tiny_cifar', iterations=6), bvit)
    assert checkpoint.depth_mismatch(timm.create_model('bvit_tiny_cifar'), bvit) == ''
    assert checkpoint.depth_mismatch(timm.create_model('bvit_tiny_cifar'), weights) == ''  # another architecture
    assert checkpoint.depth_mismatch(torch.nn.Linear(2, 2), weights) == ''
    alone = tmp_path / 'model.safetensors'  # no config.json beside it: nothing to compare with
    shutil.copy(weights, alone)
    assert checkpoint.depth_mismatch(timm.create_model('odevit_tiny_cifar'), alone) == ''
    checked_load_checkpoint(load_checkpoint)(timm.create_model('odevit_tiny_cifar'), str(weights))
    assert '6 euler steps to t=1' in capsys.readouterr().err


def test_compiled_and_ddp_checkpoints_load(tmp_path):
    """Keys saved from torch.compile (``_orig_mod.``) and DDP (``module.``) wrappers load (timm's clean_state_dict)."""
    model = timm.create_model('odevit_tiny_cifar', steps=2)
    for prefix in ('_orig_mod.', 'module.', '_orig_mod.module.'):
        path = tmp_path / f'{prefix}pth.tar'
        torch.save({'arch': 'odevit_tiny_cifar', 'args': argparse.Namespace(model_kwargs={'steps': 2}),
                    'state_dict': {prefix + k: v for k, v in model.state_dict().items()}}, path)
        _same_logits(hub.model_from_checkpoint(str(path))[0], model)
        _same_logits(timm.create_model('odevit_tiny_cifar', steps=2, pretrained=True,
                                       pretrained_cfg_overlay=dict(file=str(path))), model)


def test_the_release_with_another_global_pool_keeps_no_classifier_silently(caplog):
    """ODE-ViT has no final norm, so every pooling has the same keys: the weights' recorded pooling decides."""
    with pytest.raises(ValueError, match="trained with global_pool='token', not 'avg'.*num_classes"):
        timm.create_model('odevit_tiny_cifar.c10', pretrained=True, global_pool='avg')
    model = timm.create_model('odevit_tiny_cifar.c10', pretrained=True, global_pool='avg', num_classes=5)
    assert model.global_pool == 'avg' and "global_pool='avg' differs" in caplog.text


@pytest.mark.parametrize('edit,words', [
    (lambda c: c.update(num_classes='10'), '"num_classes" must be a JSON int'),
    (lambda c: c['model_args'].update(num_classes='10'), 'num_classes must be an integer'),
    (lambda c: c['pretrained_cfg'].update(std=[0, 0, 0]), r'std > 0'),
    (lambda c: c['pretrained_cfg'].update(mean=[0.5]), r'must each give 3 values'),
    (lambda c: c['pretrained_cfg'].update(interpolation='sharpest'), "interpolation 'sharpest'"),
    (lambda c: c['pretrained_cfg'].update(interpolation='lanczos5'), "interpolation 'lanczos5'"),  # a raw KeyError
    (lambda c: c['pretrained_cfg'].update(mean=[125.0, 122.0, 113.0]), r'mean in \[0, 1\]'),  # 0-255: garbage in
    (lambda c: c['pretrained_cfg'].update(std=['a', 'b', 'c']), 'must each give 3 values'),
    (lambda c: c['pretrained_cfg'].update(mean=0.5), 'must each give 3 values'),
    (lambda c: c['pretrained_cfg'].update(crop_pct=0), r'crop_pct 0 \(in \(0, 1\]\)'),  # timm: silently 0.875
    (lambda c: c['pretrained_cfg'].update(crop_pct=2.0), 'crop_pct 2.0'),  # a zero-padded image
    (lambda c: c['pretrained_cfg'].update(crop_mode='middle'), "crop_mode 'middle'"),  # timm: silently 'center'
    (lambda c: c.update(label_names=[*c['label_names'][:9], c['label_names'][3]]), '10 distinct names'),
])
def test_verify_folder_refuses_a_config_that_does_not_load_as_saved(exported, tmp_path, edit, words):
    folder = tmp_path / 'copy'
    shutil.copytree(exported[0], folder)
    config = json.loads((folder / 'config.json').read_text())
    edit(config)
    (folder / 'config.json').write_text(json.dumps(config))
    with pytest.raises(ValueError, match=words) as err:
        hub.verify_folder(folder)
    assert str(folder) in str(err.value)


def test_files_that_are_cut_or_hand_edited_are_named(exported, tmp_path, eval_dir):
    folder = tmp_path / 'copy'
    shutil.copytree(exported[0], folder)
    (folder / 'config.json').write_text((folder / 'config.json').read_text()[:50])
    with pytest.raises(ValueError, match=f'cannot read {folder / "config.json"}.*JSONDecodeError'):
        hub.verify_folder(folder)
    model = timm.create_model('odevit_tiny_cifar', steps=2)
    run = tmp_path / 'run'
    run.mkdir()
    torch.save({'arch': 'odevit_tiny_cifar', 'args': argparse.Namespace(model_kwargs={'steps': 2}),
                'state_dict': model.state_dict()}, run / 'last.pth.tar')
    from tools.card_extras import extend_card
    out = tmp_path / 'out'
    shutil.copytree(exported[0], out)
    card = (out / 'README.md').read_text()
    (run / 'train_time.json').write_text('{"epochs": {"0": 1')
    with pytest.raises(ValueError, match=f'cannot read {run / "train_time.json"}'):
        extend_card(out, run, {})
    for edited in ('{"seconds": "abc", "epochs": {}}', '{"foo": 1}'):  # were a raw TypeError / KeyError
        (run / 'train_time.json').write_text(edited)
        with pytest.raises(ValueError, match=f'{run / "train_time.json"} needs "seconds"'):
            extend_card(out, run, {})
    (run / 'train_time.json').unlink()
    for edited in ('garbage\x00\x01', 'epoch,train_loss\n0,2.3\n', 'epoch,eval_top1\nzero,1\n'):  # were published
        (run / 'summary.csv').write_text(edited)
        with pytest.raises(ValueError, match=str(run / 'summary.csv')):
            extend_card(out, run, {})
    assert (out / 'README.md').read_text() == card and not (out / 'summary.csv').exists()


def test_an_odeified_vit_with_train_depth_saved_with_save_for_hf_reloads(tmp_path):
    from timm.models import save_for_hf
    vit = timm.create_model('vit_tiny_patch16_224', depth=2, img_size=32, patch_size=4, num_classes=10)
    model = timm_odevit.odeify(vit)
    model.blocks.set_train_depth((1, 3))
    save_for_hf(model, tmp_path, safe_serialization=True)
    again = timm.create_model(f'local-dir:{tmp_path}', pretrained=True)
    assert again.blocks.train_depth == (1, 3)
    _same_logits(again, model)


@pytest.mark.parametrize('tag', ['odevit_tiny_cifar.c10', 'bvit_tiny_cifar.c10'])
def test_the_packaged_config_json_supplies_the_released_settings(tag):
    """One source of released settings: the config.json packaged beside the weights (a copy of the release's), read
    as local-dir: reads it; explicit kwargs win, and the settings are recorded for save_for_hf."""
    from timm_odevit.models._cfgs import packaged_weights
    release = pathlib.Path(__file__).resolve().parents[1] / 'release' / tag
    assert packaged_weights(tag).with_name('config.json').read_bytes() == (release / 'config.json').read_bytes()
    model = timm.create_model(tag, pretrained=True)
    folder = timm.create_model(f'local-dir:{release}', pretrained=True)
    assert model.blocks.solver == folder.blocks.solver and model.pretrained_model_args == folder.pretrained_model_args
    _same_logits(model, folder)
    saved = json.loads((release / 'config.json').read_text())['model_args']
    assert all(model._model_args[k] == v for k, v in saved.items())
    assert len(timm.create_model(tag, pretrained=True, **{'steps' if 'odevit' in tag else 'iterations': 4}).blocks) == 4


def test_nfe_of_an_adaptive_solver_is_the_mean_per_image(eval_dir):
    """An adaptive solver's count varies from batch to batch: the record holds the mean per image, not the last
    batch's count."""
    from timm_odevit.evaluation import evaluate
    model = timm.create_model('odevit_tiny_cifar', solver='dopri5', rtol=1e-6, atol=1e-7).eval()
    per_batch = []
    model.register_forward_hook(lambda m, args, out: per_batch.append((m.nfe, args[0].shape[0])))
    metrics = evaluate(model, str(eval_dir), 'test', batch_size=7, workers=0)
    assert metrics['images'] == sum(n for _, n in per_batch) == 30
    assert len({nfe for nfe, _ in per_batch}) > 1  # the counts do differ, or the test proves nothing
    assert metrics['nfe'] == pytest.approx(sum(nfe * n for nfe, n in per_batch) / 30, abs=0.01)


def test_export_writes_with_the_umasks_permissions_not_private_ones(exported):
    """Staging folders and temporary files are created as open() / mkdir() create them (tempfile's are 0o700 / 0o600:
    a swapped-in release would be unreadable to the other users of a shared install)."""
    folder = exported[0]
    umask = os.umask(0)
    os.umask(umask)
    assert folder.stat().st_mode & 0o777 == 0o777 & ~umask
    # model.safetensors is safetensors' own file (written 0o600 by safetensors itself)
    assert all(p.stat().st_mode & 0o777 == 0o666 & ~umask for p in folder.iterdir() if p.suffix != '.safetensors')


def test_the_cards_depth_row_of_an_adaptive_solver_gives_its_tolerances_not_steps():
    from timm_odevit.model_card import _depth
    assert _depth(timm.create_model('odevit_tiny_cifar', solver='dopri5', rtol=1e-5)) == \
        'dopri5, rtol 1e-05, atol 0.0001 over t ∈ [0, 1]'
    assert _depth(timm.create_model('odevit_tiny_cifar', steps=6)) == 'euler, 6 steps over t ∈ [0, 1]'


def test_a_timm_model_trained_at_another_input_size_exports_with_its_runs_preprocessing(tmp_path, eval_dir):
    """A plain timm ViT trained by train.py at 32 px with CIFAR statistics (--input-size, --mean, --std, --crop-pct)
    is exported, measured and reloaded through local-dir: with the preprocessing the run trained and validated with,
    not the registered 224 px ImageNet one (which would not even run: 3137 tokens against 65 position embeddings)."""
    torch.manual_seed(0)
    kwargs = {'img_size': 32, 'patch_size': 4, 'depth': 2}
    model = timm.create_model('vit_tiny_patch16_224', num_classes=10, **kwargs)
    args = argparse.Namespace(model='vit_tiny_patch16_224', model_kwargs=kwargs, input_size=[3, 32, 32], img_size=None,
                              mean=[0.4914, 0.4822, 0.4465], std=[0.2470, 0.2435, 0.2616], crop_pct=1.0,
                              interpolation='', model_ema=False)
    torch.save({'arch': 'vit_tiny_patch16_224', 'args': args, 'epoch': 0, 'state_dict': model.state_dict()},
               tmp_path / 'last.pth.tar')
    metrics = hub.export(str(tmp_path / 'last.pth.tar'), str(tmp_path / 'teacher'), eval_dir=str(eval_dir))
    cfg = json.loads((tmp_path / 'teacher' / 'config.json').read_text())['pretrained_cfg']
    assert cfg['input_size'] == [3, 32, 32] and cfg['crop_pct'] == 1.0 and 'tag' not in cfg  # not ImageNet's weights
    assert cfg['mean'] == pytest.approx(args.mean) and cfg['std'] == pytest.approx(args.std)
    loaded = timm.create_model(f'local-dir:{tmp_path / "teacher"}', pretrained=True)
    assert hub.evaluate(loaded, str(eval_dir))['top1'] == metrics['top1']
    card = (tmp_path / 'teacher' / 'README.md').read_text()  # timm's own model: not described as one of ours
    assert "timm's own `vit_tiny_patch16_224`" in card and 'once `import timm_odevit` has registered it' not in card


def test_gmacs_counts_attention_as_the_math_kernel_does():
    # torch's counter has no formula for the fused CPU attention kernel; the math kernel decomposes into counted bmms
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode
    from tools.card_extras import gmacs
    model = timm.create_model('odevit_tiny_cifar', steps=2).train()
    counter = FlopCounterMode(display=False)
    with sdpa_kernel(SDPBackend.MATH), counter, torch.no_grad():
        model.eval()(torch.zeros(1, 3, 32, 32))
    assert gmacs(model) == pytest.approx(counter.get_total_flops() / 2e9, rel=1e-6)
    tokens, dim = 1 + 10 + 64, model.embed_dim  # [CLS], 10 registers, 8 x 8 patches
    assert counter.get_flop_counts()['Global'][torch.ops.aten.bmm] == 2 * 2 * (2 * tokens * tokens * dim)
