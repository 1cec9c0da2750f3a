"""odevit-cycle: the cycle-0 record, the decision on a finished cycle, and the release with its multi-cycle record
(on a tiny fake ImageFolder and hand-made train.py run folders: no training)."""
import argparse
import csv
import hashlib
import json
import pathlib
import shutil

import pytest
import timm
import torch
import yaml
from PIL import Image

import timm_odevit  # noqa: F401
from timm_odevit import cycle, hub
from timm_odevit.models._common import CIFAR10_LABELS

COMMAND = 'python -m timm_odevit.train --config c.yaml --initial-checkpoint release/odevit_tiny_cifar.c10/model.safetensors'
KW = {'steps': 1}


def _model(seed):
    torch.manual_seed(seed)
    return timm.create_model('odevit_tiny_cifar', **KW).eval()


@pytest.fixture(scope='module')
def data(tmp_path_factory):
    """An ImageFolder with test/ and val/ splits: CIFAR-10's classes x 2 noise images."""
    root = tmp_path_factory.mktemp('data')
    gen = torch.Generator().manual_seed(0)
    for split in ('test', 'val'):
        for c in CIFAR10_LABELS:
            (root / split / c).mkdir(parents=True)
            for i in range(2):
                pixels = torch.randint(0, 256, (32, 32, 3), generator=gen, dtype=torch.uint8).numpy()
                Image.fromarray(pixels).save(root / split / c / f'{i}.png')
    return root


def _write_run(run, state, ema_state=None, rows=((0, 30.0), (1, 45.5), (2, 44.0)), best=None, **args):
    """A finished train.py run folder: args.yaml, summary.csv, train_time.json, model_best.pth.tar."""
    run.mkdir(parents=True, exist_ok=True)
    a = dict(model='odevit_tiny_cifar', model_kwargs=KW, epochs=len(rows), eval_metric='top1', lr=5e-4,
             model_ema=ema_state is not None, model_ema_force_cpu=False, amp=False, amp_dtype='float16',
             channels_last=False, initial_checkpoint='release/odevit_tiny_cifar.c10/model.safetensors')
    a.update(args)
    (run / 'args.yaml').write_text(yaml.safe_dump(a))
    with open(run / 'summary.csv', 'w', newline='') as f:
        w = csv.writer(f)
        w.writerow(['epoch', 'train_loss', 'eval_loss', 'eval_top1', 'eval_top5', 'lr'])
        for epoch, top1 in rows:
            w.writerow([epoch, 1.5 - epoch / 10, 1.4, top1, 90.0, 1e-4])
    (run / 'train_time.json').write_text(json.dumps({'epochs': {str(e): 600.0 for e, _ in rows},
                                                     'seconds': 600.0 * len(rows), 'hardware': 'Test CPU'}))
    best = best or max(rows, key=lambda r: r[1])
    ckpt = {'epoch': best[0], 'metric': best[1], 'arch': a['model'], 'args': argparse.Namespace(**a),
            'state_dict': state}
    if ema_state is not None:
        ckpt['state_dict_ema'] = ema_state
    torch.save(ckpt, run / 'model_best.pth.tar')
    return run


@pytest.fixture(scope='module')
def base_release(tmp_path_factory, data):
    """A release folder as odevit-export writes it (raw weights of epoch 2, summary.csv without a cycle column)."""
    tmp = tmp_path_factory.mktemp('base')
    run = _write_run(tmp / 'run0', _model(0).state_dict(), initial_checkpoint=None)
    folder = tmp / 'odevit_tiny_cifar.c10'
    hub.export(str(run / 'model_best.pth.tar'), str(folder), use_ema=False, eval_dir=str(data),
               train_command='python -m timm_odevit.train --config first.yaml')
    return folder


@pytest.fixture
def release(tmp_path, base_release):
    folder = tmp_path / 'release' / base_release.name
    shutil.copytree(base_release, folder)
    cycle.init_record(folder, val_top1=40.0, val_images=5000, note='test')
    return folder


def _digest(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


# ---- init ---------------------------------------------------------------------------------------------------
def test_init_records_cycle_zero_from_the_card(release):
    record = json.loads((release / cycle.RECORD).read_text())
    assert record['selection'] == {'split': 'val', 'images': 5000, 'top1': 40.0, 'weights': 'raw', 'source': 'stated'}
    c0 = record['cycles'][0]
    assert c0['cycle'] == 0 and c0['epochs'] == 3 and c0['best_epoch'] == 1 and c0['weights'] == 'raw'
    assert c0['command'] == 'python -m timm_odevit.train --config first.yaml' and c0['seconds'] == pytest.approx(
        0.5 * 3600)  # the card's rounded 0.5 h
    assert c0['per_epoch_record'] and c0['test_top1'] == record['test']['top1'] and record['test']['images'] == 20
    assert record['weights_sha256'] == hashlib.sha256((release / 'model.safetensors').read_bytes()).hexdigest()
    with pytest.raises(ValueError, match='exists'):
        cycle.init_record(release, val_top1=40.0, val_images=5000)


@pytest.mark.parametrize('tag', ['odevit_tiny_cifar.c10', 'bvit_tiny_cifar.c10'])
def test_the_released_cards_state_what_cycle_zero_needs(tag):
    card = (pathlib.Path(__file__).resolve().parents[1] / 'release' / tag / 'README.md').read_text()
    facts = cycle._card_facts(card)
    assert None not in (facts['test_top1'], facts['test_images'], facts['epochs'], facts['epoch'], facts['weights'])
    assert f"{facts['test_top1']:.2f}" in card and facts['epoch'] < facts['epochs'] and 'timm_odevit.train' in facts['command']


def test_card_layouts_old_and_new():
    old = ('name: Top-1 accuracy\n      value: 70.12\n| epochs | 12 |\n| checkpoint | epoch 11, EMA weights |\n'
           '| top-1 / top-5 (10,000 test images, measured on these weights) | 70.12 / 97.82 |\n')
    new = ('    - type: accuracy\n      value: 70.12\n      name: Top-1 accuracy\n| epochs | 12 |\n'
           '| checkpoint | model_best.pth.tar, epoch 12 of 12, EMA weights (the weights the run selected on) |\n'
           '| top-1 / top-5 (10,000 test images of CIFAR-10, 10 classes, measured) | 70.12 / 97.82 |\n')
    for card in (old, new):
        facts = cycle._card_facts(card)
        assert (facts['test_top1'], facts['test_images'], facts['epochs'], facts['epoch'], facts['weights']) == (
            70.12, 10000, 12, 11, 'ema')


def test_init_measures_the_held_out_top1_of_the_weights(release, data):
    record = cycle.init_record(release, measure_val=str(data), force=True)
    expected = hub.evaluate(timm.create_model(f'local-dir:{release}', pretrained=True), str(data), 'val')
    assert record['selection']['top1'] == round(expected['top1'], 4) and record['selection']['images'] == 20
    assert record['selection']['source'] == f'measured on {data}/val'


@pytest.mark.parametrize('kwargs, match', [
    (dict(), 'either measured'),
    (dict(val_top1=40.0, measure_val='x'), 'either measured'),
    (dict(val_top1=40.0), 'val_images'),
    (dict(val_top1=140.0, val_images=10), 'percentage'),
])
def test_init_rejects_bad_input(release, kwargs, match):
    with pytest.raises(ValueError, match=match):
        cycle.init_record(release, force=True, **kwargs)


def test_a_release_replaced_outside_the_tool_is_refused(release):
    shutil.copy(release / 'model.safetensors', release / 'keep')
    from safetensors.torch import save_file
    save_file(_model(5).state_dict(), str(release / 'model.safetensors'))
    with pytest.raises(ValueError, match='sha256 differs'):
        cycle.read_record(release)


# ---- the decision -------------------------------------------------------------------------------------------
def test_noise_floor_is_one_binomial_standard_error():
    assert cycle.noise_floor(70.9, 5000) == pytest.approx(0.642, abs=1e-3)


def test_best_epoch_is_what_model_best_holds(tmp_path):
    run = cycle.read_run(_write_run(tmp_path / 'run', _model(1).state_dict(), _model(2).state_dict()))
    assert run['weights'] == 'ema'  # train.py logs and selects by the EMA's top-1 when it validates an EMA
    best = cycle.best_epoch(run)
    assert best['epoch'] == 1 and best['top1'] == 45.5
    bad = cycle.read_run(_write_run(tmp_path / 'bad', _model(1).state_dict(), best=(2, 44.0)))
    with pytest.raises(ValueError, match='inconsistent'):
        cycle.best_epoch(bad)


def test_an_ema_kept_on_the_cpu_is_not_validated_so_the_run_selected_raw(tmp_path):
    """train.py skips validating an EMA with --model-ema-force-cpu: summary.csv is then the raw weights'."""
    run = _write_run(tmp_path / 'run', _model(1).state_dict(), _model(2).state_dict(), model_ema_force_cpu=True)
    assert cycle.read_run(run)['weights'] == 'raw'
    assert cycle.read_run(_write_run(tmp_path / 'plain', _model(1).state_dict()))['weights'] == 'raw'


@pytest.mark.parametrize('args, name', [
    ({}, 'fp32'), ({'amp': True, 'amp_dtype': 'bfloat16'}, 'bf16'), ({'channels_last': True}, 'channels_last'),
    ({'amp': True, 'amp_dtype': 'bfloat16', 'channels_last': True}, 'bf16+channels_last'),
    ({'amp': True, 'amp_dtype': 'float16'}, 'fp16'),
])
def test_speed_setting_is_read_from_the_run(args, name):
    assert cycle.speed_of(args) == name


def test_a_stated_speed_must_be_the_runs(tmp_path):
    args = {'amp': True, 'amp_dtype': 'bfloat16'}
    assert cycle.check_speed(args, '--amp --amp-dtype bfloat16', None)['setting'] == 'bf16'
    assert cycle.check_speed(args, 'bf16', {'choice': 'bf16', 'results': {}})['measured']['results'] == {}
    with pytest.raises(ValueError, match='args.yaml says'):
        cycle.check_speed(args, '--channels-last', None)
    with pytest.raises(ValueError, match='measurement chose'):
        cycle.check_speed(args, None, {'choice': 'fp32'})
    # the flags `odevit-cycle speed --hours` printed name the same setting; the sizing goes into the record
    sized = {'choice': 'bf16', 'results': {}, 'epochs': {'epochs': 9, 'hours': 1.75}}
    entry = cycle.check_speed(args, '--amp --amp-dtype bfloat16 --epochs 9', sized)
    assert entry['setting'] == 'bf16' and entry['measured']['epochs'] == {'epochs': 9, 'hours': 1.75}
    assert 'epochs' not in cycle.check_speed(args, 'bf16', {'choice': 'bf16'})['measured']
    with pytest.raises(ValueError, match='args.yaml says'):
        cycle.check_speed(args, '--epochs 9', None)  # fp32's flags, not the run's bf16


def test_not_beating_the_noise_leaves_the_release_untouched(release, tmp_path, data):
    before = _digest(release)
    run = _write_run(tmp_path / 'run', _model(1).state_dict(), _model(2).state_dict(), rows=((0, 39.0), (1, 40.5)))
    out = cycle.release_cycle(run, release, COMMAND, eval_dir=str(data))
    assert not out['improved'] and not out['released'] and out['required_gain'] == pytest.approx(0.6928, abs=1e-4)
    assert _digest(release) == before
    assert cycle.release_cycle(run, release, COMMAND, eval_dir=str(data), min_gain=0.0)['improved']  # 0.5 > 0


def test_dry_run_decides_without_writing(release, tmp_path):
    before = _digest(release)
    run = _write_run(tmp_path / 'run', _model(1).state_dict(), _model(2).state_dict())
    out = cycle.release_cycle(run, release, COMMAND, dry_run=True)  # no eval_dir needed: the test split is not read
    assert out['improved'] and not out['released'] and out['gain'] == 5.5
    assert _digest(release) == before


@pytest.mark.parametrize('change, match', [
    (dict(initial_checkpoint=None), 'from scratch'),
    (dict(initial_checkpoint='release/other.c10/model.safetensors'), 'warm restart'),
    (dict(model='bvit_tiny_cifar'), 'the release is'),
    (dict(eval_metric='loss'), 'selected on'),
])
def test_a_run_that_is_not_a_cycle_of_this_release_is_refused(release, tmp_path, change, match):
    run = _write_run(tmp_path / 'run', _model(1).state_dict(), **change)
    with pytest.raises(ValueError, match=match):
        cycle.release_cycle(run, release, COMMAND, dry_run=True)


def test_missing_files_and_command_are_named(release, tmp_path):
    run = _write_run(tmp_path / 'run', _model(1).state_dict())
    with pytest.raises(ValueError, match='command'):
        cycle.release_cycle(run, release, ' ', dry_run=True)
    (run / 'model_best.pth.tar').unlink()
    with pytest.raises(ValueError, match='model_best.pth.tar is missing'):
        cycle.release_cycle(run, release, COMMAND, dry_run=True)
    with pytest.raises(ValueError, match='odevit-cycle init'):
        cycle.read_record(tmp_path)


# ---- the release ------------------------------------------------------------------------------------------
def _logits(model, x=None):
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0)) if x is None else x
    with torch.no_grad():
        return model.eval()(x)


def test_an_improved_cycle_replaces_the_release_and_extends_its_record(release, tmp_path, data):
    package = tmp_path / 'package_copy.safetensors'
    shutil.copy(release / 'model.safetensors', package)
    raw, ema = _model(1), _model(2)
    run = _write_run(tmp_path / 'odevit_cycle1', raw.state_dict(), ema.state_dict())
    out = cycle.release_cycle(run, release, COMMAND, eval_dir=str(data), speed='fp32', package_weights=package)
    assert out['released'] and out['cycle'] == 1 and out['weights'] == 'ema'
    loaded = timm.create_model(f'local-dir:{release}', pretrained=True)
    torch.testing.assert_close(_logits(loaded), _logits(ema))  # the EMA weights: what the run selected on
    assert package.read_bytes() == (release / 'model.safetensors').read_bytes()
    hub.verify_folder(release)

    record = json.loads((release / cycle.RECORD).read_text())
    c1 = record['cycles'][1]
    assert c1['command'] == COMMAND and c1['speed'] == {'setting': 'fp32'} and c1['seconds'] == 1800.0
    assert c1['val_top1'] == 45.5 and c1['val_top1_before'] == 40.0 and c1['best_epoch'] == 1
    assert c1['test_top1_before'] == record['cycles'][0]['test_top1'] and c1['test_top1'] == round(out['test_top1'], 2)
    assert record['selection']['top1'] == 45.5 and record['selection']['weights'] == 'ema'
    assert list(c1['test_top1_at_depth']) == ['2', '3', '4', '6', '8', '12', '16', '24']  # the card's depth table
    assert record['total_seconds'] == pytest.approx(1800.0 + 1800.0)
    cycle.read_record(release)  # the record matches the new weights

    rows = list(csv.DictReader(open(release / 'summary.csv')))
    assert [(r['cycle'], r['epoch']) for r in rows] == [('0', '0'), ('0', '1'), ('0', '2'), ('1', '0'), ('1', '1'),
                                                        ('1', '2')]
    card = (release / 'README.md').read_text()
    assert card.count('## Training cycles') == 1 and card.index('## Training cycles') < card.index('## Citation')
    assert COMMAND in card and 'first.yaml' in card and 'Total training time: 1.0 h' in card
    assert cycle._card_facts(card)['test_top1'] == pytest.approx(out['test_top1'], abs=0.005)
    assert (release / 'learning_curve.png').stat().st_size > 1000

    # a second cycle extends the same record; the card keeps one section
    run2 = _write_run(tmp_path / 'odevit_cycle2', _model(3).state_dict(), _model(4).state_dict(),
                      rows=((0, 46.0), (1, 48.0)))
    assert cycle.release_cycle(run2, release, COMMAND + ' --seed 1', eval_dir=str(data))['cycle'] == 2
    record = json.loads((release / cycle.RECORD).read_text())
    assert [c['cycle'] for c in record['cycles']] == [0, 1, 2] and record['total_seconds'] == pytest.approx(4800.0)
    assert [r['cycle'] for r in csv.DictReader(open(release / 'summary.csv'))].count('2') == 2
    card = (release / 'README.md').read_text()
    assert card.count('## Training cycles') == 1 and '--seed 1' in card


def test_a_first_release_without_per_epoch_record_keeps_its_curve(release, tmp_path, data):
    (release / 'summary.csv').unlink()
    cycle.init_record(release, val_top1=40.0, val_images=5000, force=True)
    old_curve = (release / 'learning_curve.png').read_bytes()
    run = _write_run(tmp_path / 'run', _model(1).state_dict(), _model(2).state_dict())
    cycle.release_cycle(run, release, COMMAND, eval_dir=str(data))
    assert (release / cycle.CYCLE0_CURVE).read_bytes() == old_curve
    assert [r['cycle'] for r in csv.DictReader(open(release / 'summary.csv'))] == ['1', '1', '1']
    card = (release / 'README.md').read_text()
    assert 'Cycle 0 left no per-epoch record' in card and cycle.CYCLE0_CURVE in card


def test_a_failed_export_leaves_the_release_as_it_was(release, tmp_path, data):
    before = _digest(release)
    run = _write_run(tmp_path / 'run', _model(1).state_dict(), _model(2).state_dict())
    with pytest.raises(ValueError, match='eval_dir'):
        cycle.release_cycle(run, release, COMMAND)
    with pytest.raises(Exception):
        cycle.release_cycle(run, release, COMMAND, eval_dir=str(tmp_path / 'no_such_data'))
    assert _digest(release) == before
    assert not list(release.parent.glob('.*cycle-*'))  # no staging left behind


# ---- command line -----------------------------------------------------------------------------------------
def test_command_line(release, tmp_path, capsys):
    run = _write_run(tmp_path / 'run', _model(1).state_dict(), _model(2).state_dict())
    cycle.main(['release', str(run), str(release), '--command', COMMAND, '--dry-run'])
    assert json.loads(capsys.readouterr().out)['improved'] is True
    with pytest.raises(SystemExit, match='error: .*args.yaml says'):
        cycle.main(['release', str(run), str(release), '--command', COMMAND, '--speed', 'bf16', '--dry-run'])
    with pytest.raises(SystemExit, match='error: .*exists'):
        cycle.main(['init', str(release), '--val-top1', '40', '--val-images', '10'])


def test_command_line_speed_step_is_timm_odevit_speed(tmp_path, capsys):
    config = tmp_path / 'c.yaml'
    config.write_text('model: odevit_tiny_cifar\nmodel_kwargs: {steps: 1}\n')
    cycle.main(['speed', '--config', str(config), '--batch-size', '2', '--updates', '2', '--settings', 'fp32'])
    assert capsys.readouterr().out.strip() == ''  # fp32: no flags


def test_card_section_states_each_cycles_note():
    base = {'command': 'python -m timm_odevit.train --config c.yaml', 'speed': {'setting': 'fp32'}, 'epochs': 2,
            'seconds': 60.0, 'val_top1': 40.0, 'weights': 'raw', 'best_epoch': 1, 'test_top1': 39.0}
    record = {'total_seconds': 120.0, 'cycles': [
        dict(base, cycle=0, test_top1_before=None, note='5 epochs, then --resume for 2 more on a 7-epoch cosine tail'),
        dict(base, cycle=1, test_top1_before=39.0)]}
    section = cycle.card_section(record)
    assert '- Cycle 0: 5 epochs, then --resume for 2 more on a 7-epoch cosine tail' in section
    assert 'Cycle 1:' not in section  # no note, no line
    assert 'Notes:' not in cycle.card_section({'total_seconds': 60.0, 'cycles': [dict(base, cycle=0, test_top1_before=None)]})


# ---- the anytime criterion (--select-grids) -----------------------------------------------------------------
def _measured(before, after, images=5000):
    return lambda *a, **k: {'images': images, 'split': 'data/val', 'before': before, 'after': after}


@pytest.mark.parametrize('rows, after, improved', [
    (((0, 39.8), (1, 40.0)), {'1': 44.0, '2': 46.0}, True),    # mean +4.0 > SE; own grid 0.0 >= -SE
    (((0, 38.5), (1, 39.0)), {'1': 44.0, '2': 46.0}, False),   # own grid -1.0: beyond its noise (0.69)
    (((0, 39.8), (1, 45.0)), {'1': 40.3, '2': 41.0}, False),   # own grid +5 but the mean only +0.65 (SE 0.69 at 40.0)
    (((0, 39.8), (1, 45.0)), {'1': 40.5, '2': 41.2}, True),    # mean +0.85
])
def test_anytime_criterion_needs_the_mean_over_depths_and_no_loss_at_the_own_grid(release, tmp_path, monkeypatch,
                                                                                  rows, after, improved):
    monkeypatch.setattr(cycle, 'held_out_at_depths', _measured({'1': 38.0, '2': 42.0}, after))
    run = _write_run(tmp_path / 'run', _model(1).state_dict(), _model(2).state_dict(), rows=rows)
    out = cycle.release_cycle(run, release, COMMAND, dry_run=True, select_grids=[1, 2])
    c = out['criterion']
    assert out['improved'] is improved and c['mean_before'] == 40.0
    assert c['required_mean_gain'] == pytest.approx(cycle.noise_floor(40.0, 5000), abs=1e-4)
    assert c['own_grid_allowed_loss'] == out['required_gain']


def test_an_anytime_release_records_the_criterion_in_record_and_card(release, tmp_path, data, monkeypatch):
    monkeypatch.setattr(cycle, 'held_out_at_depths', _measured({'1': 38.0, '2': 42.0}, {'1': 44.0, '2': 46.0}))
    run = _write_run(tmp_path / 'run', _model(1).state_dict(), _model(2).state_dict(), rows=((0, 40.0),))
    out = cycle.release_cycle(run, release, COMMAND, eval_dir=str(data), select_grids=[1, 2])
    assert out['released']
    c1 = json.loads((release / cycle.RECORD).read_text())['cycles'][1]
    assert c1['criterion']['val_top1_at_depth'] == {'1': 44.0, '2': 46.0} and c1['criterion']['mean_gain'] == 5.0
    card = (release / 'README.md').read_text()
    assert 'Cycle 1: released on the anytime criterion: mean held-out top-1 over depths 1, 2 40.00 → 45.00' in card


def test_anytime_measurement_is_both_models_on_the_runs_validation_split(release, tmp_path, data):
    ema = _model(2)
    run = _write_run(tmp_path / 'run', _model(1).state_dict(), ema.state_dict(), data_dir=str(data), val_split='val')
    measured = cycle.held_out_at_depths(release, cycle.best_epoch(cycle.read_run(run)), cycle.read_run(run), [1, 3])
    released = timm.create_model(f'local-dir:{release}', pretrained=True)
    for key, model in (('before', released), ('after', ema)):
        expected = {str(r['depth']): round(r['top1'], 4) for r in hub.evaluate_grids(model, str(data), 'val', [1, 3])}
        assert measured[key] == expected, key
    assert measured['images'] == 20
    gone = _write_run(tmp_path / 'run2', _model(1).state_dict(), data_dir=str(tmp_path / 'gone'), val_split='val')
    with pytest.raises(ValueError, match='is not a folder here'):
        cycle.release_cycle(gone, release, COMMAND, dry_run=True, select_grids=[1, 2])
