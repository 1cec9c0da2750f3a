"""tools.cycle: the cycle-0 record, the decision on a finished cycle, and the release with its multi-cycle record
(on a tiny fake ImageFolder and hand-made train.py run folders: no training); a release interrupted at any point
leaves the old or the new folder, whole."""
import argparse
import csv
import hashlib
import json
import multiprocessing
import os
import pathlib
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest
import timm
import torch
import yaml
from PIL import Image

import timm_odevit  # noqa: F401
from timm_odevit import hub
from timm_odevit.models._cfgs import CIFAR10_LABELS
from timm_odevit.data import image_folder
from timm_odevit.evaluation import evaluate_grids
from tools import atomic, cycle

ROOT = pathlib.Path(__file__).resolve().parents[2]
TAG = 'odevit_tiny_cifar.c10'
COMMAND = f'python -m timm_odevit.train --config c.yaml --initial-checkpoint release/{TAG}/model.safetensors'
FIRST = 'python -m timm_odevit.train --config first.yaml'
KW = {'steps': 1}
SE = cycle.noise_floor(40.0, 20)  # the release's noise floor: 40 % on the 20 held-out images, 10.95 points


def _model(seed):
    torch.manual_seed(seed)
    return timm.create_model('odevit_tiny_cifar', **KW).eval()


def _image_folder(root, splits):
    gen = torch.Generator().manual_seed(0)
    for split, per_class in splits.items():
        for c in CIFAR10_LABELS:
            (root / split / c).mkdir(parents=True)
            for i in range(per_class):
                pixels = torch.randint(0, 256, (32, 32, 3), generator=gen, dtype=torch.uint8).numpy()
                Image.fromarray(pixels).save(root / split / c / f'{i}.png')
    return root


@pytest.fixture(scope='module')
def data(tmp_path_factory):
    """An ImageFolder with test/ and val/ splits: CIFAR-10's classes x 2 noise images."""
    return _image_folder(tmp_path_factory.mktemp('data'), {'test': 2, 'val': 2})


def _write_run(run, state, ema_state=None, rows=((0, 30.0), (1, 57.5), (2, 44.0)), best=None, **args):
    """A finished train.py run folder: args.yaml, summary.csv, train_time.json, model_best.pth.tar."""
    run.mkdir(parents=True, exist_ok=True)
    a = dict(model='odevit_tiny_cifar', model_kwargs=KW, epochs=len(rows), eval_metric='top1', lr=5e-4,
             model_ema=ema_state is not None, model_ema_force_cpu=False, amp=False, amp_dtype='float16',
             channels_last=False, initial_checkpoint=f'release/{TAG}/model.safetensors', val_split='val')
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


@pytest.fixture
def run_of(tmp_path, data):
    """A cycle's run folder under tmp_path, validated on the data's val split (raw weights seed 1, EMA seed 2)."""
    def write(name='run', state=None, ema=True, **kw):
        state = _model(1).state_dict() if state is None else state
        return _write_run(tmp_path / name, state, _model(2).state_dict() if ema is True else ema or None,
                          **dict(dict(data_dir=str(data)), **kw))
    return write


@pytest.fixture(scope='module')
def base_release(tmp_path_factory, data):
    """A release folder as odevit-export writes it (raw weights of epoch 1, 40 % held-out), recorded as cycle 0."""
    tmp = tmp_path_factory.mktemp('base')
    run = _write_run(tmp / 'run0', _model(0).state_dict(), rows=((0, 30.0), (1, 40.0), (2, 35.0)),
                     initial_checkpoint=None, data_dir=str(data))
    folder = tmp / TAG
    hub.export(str(run / 'model_best.pth.tar'), str(folder), use_ema=False, eval_dir=str(data), train_command=FIRST)
    cycle.init_record(folder, run, FIRST, str(data), note='test')
    return folder


@pytest.fixture
def release(tmp_path, base_release):
    folder = tmp_path / 'release' / TAG
    shutil.copytree(base_release, folder)
    return folder


def _digest(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def _record(folder):
    return json.loads((folder / cycle.RECORD).read_text())


# ---- init ---------------------------------------------------------------------------------------------------
def test_init_records_cycle_zero_from_its_run_and_the_measured_test_split(release, data):
    record = _record(release)
    assert record['selection'] == {'split': 'val', 'images': 20, 'top1': 40.0, 'weights': 'raw',
                                   'source': "train.py's eval_top1 of run0, epoch 1"}
    c0 = record['cycles'][0]
    assert (c0['cycle'], c0['epochs'], c0['best_epoch'], c0['weights'], c0['command']) == (0, 3, 1, 'raw', FIRST)
    assert c0['seconds'] == 1800.0 and c0['hardware'] == 'Test CPU' and c0['speed'] == {'setting': 'fp32'}
    assert c0['recorded']['commit'] == cycle.checkout_commit() and c0['recorded']['date'].startswith('20')
    assert (c0['val_split'], c0['val_images'], c0['test_images']) == ('val', 20, 20) and c0['note'] == 'test'
    measured = hub.evaluate(timm.create_model(f'local-dir:{release}', pretrained=True), str(data), 'test')
    assert record['test'] == {'top1': round(measured['top1'], 2), 'top5': round(measured['top5'], 2), 'images': 20,
                              'split': 'test', 'nfe_per_image': measured['nfe']}
    assert c0['per_epoch_record'] and c0['test_top1'] == record['test']['top1'] == cycle.card_top1(release)
    assert record['weights_sha256'] == hashlib.sha256((release / 'model.safetensors').read_bytes()).hexdigest()
    with pytest.raises(ValueError, match='exists'):
        cycle.init_record(release, None, FIRST, str(data))


def test_init_gives_top1_at_other_depths_as_a_released_cycle_does(release, data, tmp_path):
    """A first release carries the card's "Accuracy at other depths" table too, and its record the same numbers."""
    from timm_odevit import evaluation
    run = _write_run(tmp_path / 'run0', _model(0).state_dict(), rows=((0, 30.0), (1, 40.0), (2, 35.0)),
                     initial_checkpoint=None, data_dir=str(data))  # base_release's run
    with pytest.raises(ValueError, match='grid'):
        cycle.init_record(release, run, FIRST, str(data), force=True, grids=(0,))
    record = cycle.init_record(release, run, FIRST, str(data), force=True, grids=(2, 3))
    card = (release / 'README.md').read_text()
    table = card[card.index('## Accuracy at other depths'):card.index('## Citation')]
    model = timm.create_model(f'local-dir:{release}', pretrained=True)
    expected = evaluation.evaluate_grids(model, str(data), 'test', [2, 3])
    assert record['cycles'][0]['test_top1_at_depth'] == {str(r['depth']): round(r['top1'], 2) for r in expected}
    for r in expected:
        assert f"| {r['depth']}{' (trained)' if r['depth'] == model.blocks.solver.steps else ''} | {r['nfe']:g} | " \
               f"{r['top1']:.2f} ±" in table


def test_init_refuses_weights_that_are_not_the_runs_selection(release, data, run_of):
    other = run_of('other', state=_model(5).state_dict(), ema=False, rows=((0, 40.0),))
    with pytest.raises(ValueError, match='are not the raw weights of epoch 0'):
        cycle.init_record(release, other, FIRST, str(data), force=True)
    with pytest.raises(ValueError, match='command'):
        cycle.init_record(release, other, ' ', str(data), force=True)


@pytest.mark.parametrize('tag', ['odevit_tiny_cifar.c10', 'bvit_tiny_cifar.c10', 'odevit_tiny_convstem_cifar.c10_pnp'])
def test_the_released_records_are_consistent(tag):
    record = cycle.read_record(ROOT / 'release' / tag)
    assert record['selection']['images'] == 5000 and record['test']['images'] == 10000


# ---- the record refuses what contradicts it ----------------------------------------------------------------
def _edit(folder, change):
    record = _record(folder)
    change(record)
    (folder / cycle.RECORD).write_text(json.dumps(record))


@pytest.mark.parametrize('change, match', [
    (lambda r: r['selection'].update(top1=30.0), "selection / test are not the last cycle's"),
    (lambda r: r['selection'].update(images=5000), "selection / test are not the last cycle's"),  # a smaller noise
    (lambda r: (r['selection'].update(top1=30.0), r['cycles'][-1].update(val_top1=30.0)), 'not its rows'),
    (lambda r: (r['test'].update(top1=1.0), r['cycles'][-1].update(test_top1=1.0)), "card's test top-1"),
    (lambda r: r['selection'].update(images='5000'), 'not a top-1 measured on images'),
    (lambda r: r.update(total_seconds=10.0), 'not the sum'),
    (lambda r: r.pop('test'), "KeyError: 'test'"),
])
def test_a_record_that_contradicts_itself_is_refused(release, change, match):
    _edit(release, change)
    with pytest.raises(ValueError, match=match):
        cycle.read_record(release)


def test_a_record_refused_names_the_file(release, tmp_path):
    (release / cycle.RECORD).write_text('{"tag": ')  # truncated
    with pytest.raises(ValueError, match=f'cannot read {release / cycle.RECORD}'):
        cycle.read_record(release)
    with pytest.raises(ValueError, match='python -m tools.cycle init'):
        cycle.read_record(tmp_path)


def test_a_release_replaced_outside_the_tool_is_refused(release):
    from safetensors.torch import save_file
    save_file(_model(5).state_dict(), str(release / 'model.safetensors'))
    with pytest.raises(ValueError, match='sha256 differs'):
        cycle.read_record(release)


def test_a_released_cycle_edited_by_hand_is_refused(release, run_of, data):
    cycle.release_cycle(run_of(), release, COMMAND, eval_dir=str(data), grids=())
    _edit(release, lambda r: (r['selection'].update(top1=50.0), r['cycles'][1].update(val_top1=50.0)))
    with pytest.raises(ValueError, match="cycle 1's epochs, best epoch or val_top1 are not its rows"):
        cycle.release_cycle(run_of('next'), release, COMMAND, dry_run=True)


# ---- the decision -------------------------------------------------------------------------------------------
def test_noise_floor_is_one_binomial_standard_error():
    assert cycle.noise_floor(70.9, 5000) == pytest.approx(0.642, abs=1e-3)


def test_the_gate_allows_for_picking_the_best_of_k_epochs(release, run_of):
    assert [round(cycle.selection_margin(k), 3) for k in (1, 2, 9)] == [1.0, 1.177, 2.096]
    rows = tuple((e, 30.0) for e in range(8)) + ((8, 40.0 + 1.5 * SE),)  # 1.5 SE: enough for one epoch, not for 9
    out = cycle.release_cycle(run_of(rows=rows), release, COMMAND, dry_run=True)
    assert out['evaluations_compared'] == 9 and out['required_gain'] == pytest.approx(cycle.selection_margin(9) * SE, abs=1e-3)
    assert not out['improved']
    assert cycle.release_cycle(run_of('one', rows=((0, 40.0 + 1.5 * SE),)), release, COMMAND, dry_run=True)['improved']


def test_best_epoch_is_what_model_best_holds(tmp_path):
    run = cycle.read_run(_write_run(tmp_path / 'run', _model(1).state_dict(), _model(2).state_dict(),
                                    rows=((0, 30.0), (1, 45.5), (2, 44.0))))
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


def test_damaged_run_files_are_named(tmp_path):
    run = _write_run(tmp_path / 'run', _model(1).state_dict())
    (run / 'train_time.json').write_text('{"seconds": ')
    with pytest.raises(ValueError, match='cannot read .*train_time.json'):
        cycle.read_run(run)
    (run / 'summary.csv').write_text('epoch,eval_top1\n0,nan%\n')
    with pytest.raises(ValueError, match='summary.csv has no rows of epoch and eval_top1'):
        cycle.read_run(run)
    (run / 'train_time.json').unlink()  # a run of timm_odevit.train, not tools.train: no wall time to record
    with pytest.raises(ValueError, match='no train_time.json .* python -m tools.train'):
        cycle.read_run(run)


@pytest.mark.parametrize('args, name', [
    ({}, 'fp32'), ({'amp': True, 'amp_dtype': 'bfloat16'}, 'bf16'), ({'channels_last': True}, 'channels_last'),
    ({'amp': True, 'amp_dtype': 'bfloat16', 'channels_last': True}, 'bf16+channels_last'),
    ({'amp': True, 'amp_dtype': 'float16'}, 'fp16'),
])
def test_speed_setting_is_read_from_the_run(args, name):
    assert cycle.speed_of(args) == name


def test_a_stated_speed_must_be_the_runs():
    args = {'amp': True, 'amp_dtype': 'bfloat16'}
    assert cycle.check_speed(args, '--amp --amp-dtype bfloat16', None)['setting'] == 'bf16'
    assert cycle.check_speed(args, 'bf16', {'choice': 'bf16', 'results': {}})['measured']['results'] == {}
    with pytest.raises(ValueError, match='args.yaml says'):
        cycle.check_speed(args, '--channels-last', None)
    with pytest.raises(ValueError, match='measurement chose'):
        cycle.check_speed(args, None, {'choice': 'fp32'})
    # the flags `python -m tools.speed --hours` printed name the same setting; the sizing goes into the record
    sized = {'choice': 'bf16', 'results': {}, 'epochs': {'epochs': 9, 'hours': 1.75}}
    entry = cycle.check_speed(args, '--amp --amp-dtype bfloat16 --epochs 9', sized)
    assert entry['setting'] == 'bf16' and entry['measured']['epochs'] == {'epochs': 9, 'hours': 1.75}
    assert 'epochs' not in cycle.check_speed(args, 'bf16', {'choice': 'bf16'})['measured']
    with pytest.raises(ValueError, match='args.yaml says'):
        cycle.check_speed(args, '--epochs 9', None)  # fp32's flags, not the run's bf16


def test_the_recorded_commit_is_the_checkouts_and_says_when_it_differs(tmp_path):
    def git(*a):
        subprocess.run(['git', '-C', str(tmp_path), *a], check=True, capture_output=True)
    assert cycle.checkout_commit(tmp_path) == 'unknown'  # not a git checkout
    git('init', '-q')
    for path in ('tools/x.py', 'release/tag/record.json', 'timm_odevit/weights/tag/model.safetensors'):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text('0')
    git('add', '.')
    git('-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-q', '-m', 'c')
    head = subprocess.run(['git', '-C', str(tmp_path), 'rev-parse', 'HEAD'], capture_output=True, text=True).stdout.strip()
    (tmp_path / 'release/tag/record.json').write_text('1')  # what the tooling itself writes: still clean
    (tmp_path / 'timm_odevit/weights/tag/model.safetensors').write_text('1')
    assert cycle.checkout_commit(tmp_path / 'tools') == head
    (tmp_path / 'tools/x.py').write_text('1')
    assert cycle.checkout_commit(tmp_path / 'tools') == head + '+dirty'


def test_the_speed_measurement_must_have_timed_the_runs_teacher():
    teacher = {'kd_model_name': 'local-dir:release/teacher', 'kd_distill_type': 'logit'}
    distilled = {**teacher, 'amp': False}
    entry = cycle.check_speed(distilled, None, {'choice': 'fp32', 'teacher': teacher})
    assert entry['measured']['teacher'] == teacher
    for args, record in (  # student-only timing of a distilled run, the other way round, another kind or teacher
            (distilled, {'choice': 'fp32'}), ({'kd_distill_type': 'logit'}, {'choice': 'fp32', 'teacher': teacher}),
            ({**distilled, 'kd_distill_type': 'trajectory'}, {'choice': 'fp32', 'teacher': teacher}),
            ({**distilled, 'kd_model_name': 'hf-hub:org/other'}, {'choice': 'fp32', 'teacher': teacher}),
            ({**distilled, 'kd_distill_type': 'trajectory', 'kd_tokens': 'all'},  # a flag that changes the work
             {'choice': 'fp32', 'teacher': {**teacher, 'kd_distill_type': 'trajectory'}})):
        with pytest.raises(ValueError, match="names the run's teacher"):
            cycle.check_speed(args, None, record)


def test_the_speed_measurement_must_have_timed_the_runs_model_kwargs():
    run = {'model': 'odevit_tiny_cifar', 'model_kwargs': {'steps': 6, 'train_depth': [3, 6]}}
    timed = {'choice': 'fp32', 'model': 'odevit_tiny_cifar',
             'model_kwargs': {'steps': 6, 'train_depth': (3, 6), 'num_classes': 10}}
    assert cycle.check_speed(run, None, timed)['setting'] == 'fp32'
    for other in ({**timed, 'model_kwargs': {'steps': 6, 'train_depth': [3, 9], 'num_classes': 10}},
                  {**timed, 'model_kwargs': {'steps': 6, 'num_classes': 10}}, {**timed, 'model': 'bvit_tiny_cifar'}):
        with pytest.raises(ValueError, match="the run's --model-kwargs"):
            cycle.check_speed(run, None, other)
    with pytest.raises(ValueError, match="the run's --model-kwargs"):  # named first, before the setting it chose
        cycle.check_speed(run, None, {**timed, 'choice': 'bf16', 'model': 'bvit_tiny_cifar'})


def test_not_beating_the_noise_leaves_the_release_untouched(release, run_of, data):
    before = _digest(release)
    run = run_of(rows=((0, 39.0), (1, 50.5)))
    out = cycle.release_cycle(run, release, COMMAND, eval_dir=str(data))
    assert not out['improved'] and not out['released']
    assert out['required_gain'] == pytest.approx(SE * cycle.selection_margin(2), abs=1e-4)  # the best of 2 epochs
    assert out['val_images'] == 20 and _digest(release) == before
    assert cycle.release_cycle(run, release, COMMAND, eval_dir=str(data), min_gain=0.0, dry_run=True)['improved']


def test_dry_run_decides_without_writing(release, run_of):
    before = _digest(release)
    out = cycle.release_cycle(run_of(), release, COMMAND, dry_run=True)  # no eval_dir: the test split is not read
    assert out['improved'] and not out['released'] and out['gain'] == 17.5
    assert _digest(release) == before and not cycle.refused_log(release).exists()


def test_a_refused_cycle_is_logged_beside_the_release_a_released_one_in_its_record(release, run_of, data):
    log, start = cycle.refused_log(release), _record(release)['weights_sha256']
    assert log == release.parent / f'{TAG}.refused.json'
    low = run_of('low', rows=((0, 39.0), (1, 50.5)))
    refused = [cycle.release_cycle(low, release, COMMAND + f' --seed {s}', eval_dir=str(data)) for s in (3, 4)]
    released = cycle.release_cycle(run_of(), release, COMMAND, eval_dir=str(data), grids=())
    entries = json.loads(log.read_text())
    assert [{k: e[k] for k in refused[0] if k != 'logged_to'} for e in entries] == [
        {k: v for k, v in r.items() if k != 'logged_to'} for r in refused]
    assert refused[0]['logged_to'] == str(log) and not entries[0]['released']
    assert (entries[0]['from_cycle'], entries[0]['started_from_sha256']) == (0, start)
    first = entries[0]
    assert first['command'] == COMMAND + ' --seed 3' and first['epochs'] == 2 and first['speed'] == 'fp32'
    assert set(first['recorded']) == {'commit', 'date'} and (first['seconds'], first['hardware']) == (1200.0, 'Test CPU')
    assert released['released'] and len(json.loads(log.read_text())) == 2 and 'logged_to' not in released
    assert sorted(p.name for p in release.parent.iterdir()) == [TAG, log.name]  # no temporary file left


def test_a_log_that_cannot_take_the_refusal_is_an_error_before_measuring(release, run_of, data, tmp_path, monkeypatch):
    def measure(*a, **k):
        raise AssertionError('measured before the log was checked')
    monkeypatch.setattr(cycle, 'held_out_at_depths', measure)
    log = tmp_path / 'log.json'
    log.write_text('{"not": "a list"}')
    (tmp_path / '.log.json.0123abcd.tmp').write_text('a killed write')
    low = run_of(rows=((0, 39.0), (1, 50.5)))
    with pytest.raises(ValueError, match='not a readable JSON list.*restore it from git or move it aside'):
        cycle.release_cycle(low, release, COMMAND, eval_dir=str(data), log=log, select_grids=[1, 2])
    assert log.read_text() == '{"not": "a list"}' and not (tmp_path / '.log.json.0123abcd.tmp').exists()
    with pytest.raises(ValueError, match='does not exist'):
        cycle.release_cycle(low, release, COMMAND, eval_dir=str(data), log=tmp_path / 'no' / 'log.json',
                            select_grids=[1, 2])


def test_a_refusal_that_cannot_be_written_keeps_the_decision_in_the_error(release, run_of, data, monkeypatch):
    def fail(*a, **k):
        raise OSError(28, 'No space left on device')
    monkeypatch.setattr(cycle, 'write_atomic', fail)
    with pytest.raises(OSError, match=r'could not be logged to .*No space left.*the decision: \{"release": '):
        cycle.release_cycle(run_of(rows=((0, 39.0), (1, 50.5))), release, COMMAND, eval_dir=str(data))


def test_an_anytime_refusal_renders_in_the_docs_depth_table(release, run_of, data, monkeypatch):
    import importlib.util
    spec = importlib.util.spec_from_file_location('render', ROOT / 'docs' / 'render.py')
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
    monkeypatch.setattr(cycle, 'held_out_at_depths', _measured({'1': 38.0, '2': 42.0}, {'1': 45.0, '2': 47.0}))
    command = COMMAND + " --model-kwargs steps=2 'train_depth=[1,2]'"  # the steps drawn name the refused row
    out = cycle.main(['release', str(run_of(rows=((0, 39.8), (1, 40.0)))), str(release), '--command', command,
                      '--select-grids', '1', '2', '--refused-log', str(release.parent / 'kept.json')])
    assert out is None and not cycle.refused_log(release).exists()  # --refused-log: that file, not the default
    (release.parent / 'kept.json').rename(cycle.refused_log(release))
    cycle.main(['release', str(run_of('two', rows=((0, 39.8), (1, 40.0)))), str(release), '--command', command,
                '--select-grids', '1', '2'])  # a second refusal from the same cycle, in the default log
    table = render.table_release_depths(render.Context(release=release.parent))
    # cycle 0 has no held-out depths of its own: the release's, measured for the refusals, come first, once
    assert table.count('| held-out, cycle 0 before the cycle refused ') == 1 and '| 38.0 | 42.0 |' in table
    assert table.count('; 2 epochs at 1–2 steps; mean +6.00, needed > 12.90) | 20 | 45.0 | 47.0 |') == 2


@pytest.mark.parametrize('change, match', [
    (dict(initial_checkpoint=None), 'from scratch'),
    (dict(initial_checkpoint='release/other.c10/model.safetensors'), 'warm restart'),
    (dict(model='bvit_tiny_cifar'), 'the release is'),
    (dict(eval_metric='loss'), 'selected on'),
    (dict(val_split='test'), "20 'test' images, the release was selected on 20 'val' images"),
    (dict(data_dir='gone'), 'is not a folder here'),
])
def test_a_run_that_is_not_a_cycle_of_this_release_is_refused(release, run_of, change, match):
    with pytest.raises(ValueError, match=match):
        cycle.release_cycle(run_of(**change), release, COMMAND, dry_run=True)


def test_a_run_validated_on_fewer_images_is_refused(release, run_of, tmp_path):
    """10 held-out images are not the release's 20: their top-1 is not comparable (nor is its noise)."""
    small = _image_folder(tmp_path / 'small', {'val': 1})
    with pytest.raises(ValueError, match="10 'val' images, the release was selected on 20 'val' images"):
        cycle.release_cycle(run_of(data_dir=str(small)), release, COMMAND, dry_run=True)


def test_missing_files_and_command_are_named(release, run_of):
    run = run_of()
    with pytest.raises(ValueError, match='command'):
        cycle.release_cycle(run, release, ' ', dry_run=True)
    (run / 'model_best.pth.tar').unlink()
    with pytest.raises(ValueError, match='model_best.pth.tar is missing'):
        cycle.release_cycle(run, release, COMMAND, dry_run=True)


# ---- the release ------------------------------------------------------------------------------------------
def _logits(model, x=None):
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0)) if x is None else x
    with torch.no_grad():
        return model.eval()(x)


def test_an_improved_cycle_replaces_the_release_and_extends_its_record(release, tmp_path, run_of, data):
    package = tmp_path / 'weights' / TAG
    shutil.copytree(release, package)
    out = cycle.release_cycle(run_of('odevit_cycle1'), release, COMMAND, eval_dir=str(data), speed='fp32',
                              package_dir=package)
    assert out['released'] and out['cycle'] == 1 and out['weights'] == 'ema' and out['test_images'] == 20
    loaded = timm.create_model(f'local-dir:{release}', pretrained=True)
    torch.testing.assert_close(_logits(loaded), _logits(_model(2)))  # the EMA weights: what the run selected on
    assert all((package / f).read_bytes() == (release / f).read_bytes() for f in atomic.PACKAGED)
    hub.verify_folder(release)
    assert not [p.name for p in release.parent.iterdir() if p.name != TAG]  # no staging, backup or temporary file

    record = cycle.read_record(release)  # the record matches the new weights, card and summary.csv
    c1 = record['cycles'][1]
    assert c1['command'] == COMMAND and c1['speed'] == {'setting': 'fp32'} and c1['seconds'] == 1800.0
    assert c1['val_top1'] == 57.5 and c1['val_top1_before'] == 40.0 and c1['best_epoch'] == 1
    assert (c1['val_split'], c1['val_images'], c1['test_images']) == ('val', 20, 20)
    assert c1['test_top1_before'] == record['cycles'][0]['test_top1'] and c1['test_top1'] == round(out['test_top1'], 2)
    assert record['selection']['top1'] == 57.5 and record['selection']['weights'] == 'ema'
    assert list(c1['test_top1_at_depth']) == ['2', '3', '4', '6', '8', '12', '16', '24']  # the card's depth table
    assert record['total_seconds'] == pytest.approx(1800.0 + 1800.0)

    rows = list(csv.DictReader(open(release / 'summary.csv')))
    assert [(r['cycle'], r['epoch']) for r in rows] == [('0', '0'), ('0', '1'), ('0', '2'), ('1', '0'), ('1', '1'),
                                                        ('1', '2')]
    card = (release / 'README.md').read_text()
    assert card.count('## Training cycles') == 1 and card.index('## Training cycles') < card.index('## Citation')
    assert COMMAND in card and 'first.yaml' in card and 'Total training time: 1.0 h' in card
    assert f'The wheel carries these weights: `{TAG}`' in card and f"create_model('{TAG}'" in card  # packaged_usage
    assert card.index('## Accuracy at other depths') < card.index('## Training cycles')  # card_extras.with_depths
    assert 'see "Accuracy at other depths"' in card and 'measure first' not in card
    assert cycle.card_top1(release) == pytest.approx(out['test_top1'], abs=0.005)
    predictions = json.loads((release / cycle.PREDICTIONS).read_text())  # what the card's top-1 follows from
    labels = [t for _, t in image_folder(data, 'test')[1]]
    assert predictions['images'] == len(labels) and 100 * sum(
        p == t for p, t in zip(predictions['predicted'], labels)) / len(labels) == pytest.approx(out['test_top1'], abs=5e-3)
    assert (release / 'learning_curve.png').stat().st_size > 1000

    # a second cycle extends the same record; the card keeps one section, the folder its HISTORY.md
    (release / cycle.HISTORY).write_text('# why the recipe changed\n')
    run2 = run_of('odevit_cycle2', state=_model(3).state_dict(), ema=_model(4).state_dict(), rows=((0, 60.0), (1, 72.5)))
    assert cycle.release_cycle(run2, release, COMMAND + ' --seed 1', eval_dir=str(data), grids=())['cycle'] == 2
    record = cycle.read_record(release)
    assert [c['cycle'] for c in record['cycles']] == [0, 1, 2] and record['total_seconds'] == pytest.approx(4800.0)
    assert [r['cycle'] for r in csv.DictReader(open(release / 'summary.csv'))].count('2') == 2
    card = (release / 'README.md').read_text()
    assert card.count('## Training cycles') == 1 and '--seed 1' in card
    assert (release / cycle.HISTORY).read_text() == '# why the recipe changed\n'


def test_a_first_release_without_per_epoch_record_keeps_its_curve(release, run_of, data):
    (release / 'summary.csv').unlink()
    _edit(release, lambda r: r['cycles'][0].update(per_epoch_record=False))
    old_curve = (release / 'learning_curve.png').read_bytes()
    cycle.release_cycle(run_of(), release, COMMAND, eval_dir=str(data), grids=())
    assert (release / cycle.CYCLE0_CURVE).read_bytes() == old_curve
    assert [r['cycle'] for r in csv.DictReader(open(release / 'summary.csv'))] == ['1', '1', '1']
    card = (release / 'README.md').read_text()
    assert 'Cycle 0 left no per-epoch record' in card and cycle.CYCLE0_CURVE in card
    # the next cycle carries it over, and the card still links it
    cycle.release_cycle(run_of('next', rows=((0, 70.0),)), release, COMMAND, eval_dir=str(data), grids=())
    assert (release / cycle.CYCLE0_CURVE).read_bytes() == old_curve and cycle.CYCLE0_CURVE in (
        release / 'README.md').read_text()


def test_a_failed_export_leaves_the_release_as_it_was(release, run_of, tmp_path):
    before = _digest(release)
    run = run_of()
    with pytest.raises(ValueError, match='eval_dir'):
        cycle.release_cycle(run, release, COMMAND)
    with pytest.raises(ValueError, match='no_such_data'):
        cycle.release_cycle(run, release, COMMAND, eval_dir=str(tmp_path / 'no_such_data'))
    assert _digest(release) == before
    assert not [p.name for p in release.parent.iterdir() if p.name != TAG]  # no staging left behind


# ---- interruptions: every write and rename, and SIGKILL -----------------------------------------------------
def _state(release, package, before):
    """'old' or 'new' when the folder (after the next command's recovery) is whole, loads, and its record matches its
    weights; the package's copy is the folder's weights and config; nothing is left beside it."""
    hub.verify_folder(release)
    record = cycle.read_record(release)
    timm.create_model(f'local-dir:{release}', pretrained=True)
    assert all((package / f).read_bytes() == (release / f).read_bytes() for f in atomic.PACKAGED)
    assert not [p.name for p in release.parent.iterdir() if p.name != TAG]
    assert not list(release.glob('.*')) and not list(package.glob('.*'))
    if _digest(release) == before:
        return 'old'
    assert [c['cycle'] for c in record['cycles']] == [0, 1] and record['selection']['top1'] == 57.5
    return 'new'


def _fresh(base_release, tmp_path, k):
    release = tmp_path / str(k) / 'release' / TAG
    shutil.copytree(base_release, release)
    package = tmp_path / str(k) / 'weights' / TAG
    package.mkdir(parents=True)
    for name in atomic.PACKAGED:
        shutil.copy(release / name, package / name)
    return release, package


def test_a_failure_at_any_rename_leaves_the_old_or_the_new_release(base_release, run_of, data, tmp_path, monkeypatch):
    """Each os.replace / os.rename of a release (the atomic writes, the export's and the folder swap's renames)
    raises in turn; the next command then finds the old folder or the complete new one."""
    run, before, states = run_of(), _digest(base_release), []
    real = {name: getattr(os, name) for name in ('replace', 'rename')}
    for k in range(1, 30):
        release, package = _fresh(base_release, tmp_path, k)
        calls = []

        def failing(name):
            def call(*args, **kwargs):
                calls.append(args)
                if len(calls) == k:
                    raise OSError(f'injected failure at {name} #{k}')
                return real[name](*args, **kwargs)
            return call
        for name in real:
            monkeypatch.setattr(os, name, failing(name))
        try:
            cycle.release_cycle(run, release, COMMAND, eval_dir=str(data), package_dir=package, grids=())
            failed = False
        except Exception as e:  # noqa: BLE001  (any error the injected one became)
            failed = 'injected' in str(e)
        finally:
            monkeypatch.undo()
        cycle.release_cycle(run, release, COMMAND, dry_run=True, package_dir=package)  # the next command
        states.append(_state(release, package, before))
        if not failed:
            break
    assert states[-1] == 'new' and 'old' in states and len(states) >= 6, states  # it ran through every rename


def _release_in_child(release, package, run, data, kill_after=None):
    """The release step in a forked child process, SIGKILLed after ``kill_after`` seconds (if still running)."""
    def step():
        torch.set_num_threads(1)  # as DataLoader workers do: no OpenMP thread team in a forked process
        cycle.release_cycle(run, release, COMMAND, eval_dir=str(data), package_dir=package, grids=())
    child = multiprocessing.get_context('fork').Process(target=step)
    start = time.monotonic()
    child.start()
    child.join(kill_after)
    if child.is_alive():
        child.kill()
        child.join()
    assert child.exitcode in (0, -signal.SIGKILL), child.exitcode  # finished or killed, never failed
    return time.monotonic() - start


def test_a_killed_release_leaves_the_old_or_the_new_release(base_release, run_of, data, tmp_path):
    """The release step in a child process, SIGKILLed at random moments (TOOLS_KILLS of them, 3 by default; seed
    TOOLS_KILL_SEED): after the next command the folder loads and its record matches its weights."""
    run, before = run_of(), _digest(base_release)
    release, package = _fresh(base_release, tmp_path, 'whole')
    seconds = _release_in_child(release, package, run, data)
    assert _state(release, package, before) == 'new'
    rng = random.Random(int(os.environ.get('TOOLS_KILL_SEED', '0')))
    for k in range(int(os.environ.get('TOOLS_KILLS', '3'))):
        release, package = _fresh(base_release, tmp_path, k)
        _release_in_child(release, package, run, data, kill_after=rng.uniform(0, seconds))
        cycle.release_cycle(run, release, COMMAND, dry_run=True, package_dir=package)  # the next command
        _state(release, package, before)


def test_a_swap_cut_between_its_renames_is_restored_by_the_next_command(release, tmp_path):
    before = _digest(release)
    release.rename(atomic.backup_of(release))  # killed after the first rename
    (release.parent / f'.{TAG}.cycle-x').mkdir()
    atomic.recover(release)
    assert _digest(release) == before and not [p.name for p in release.parent.iterdir() if p.name != TAG]


def test_a_swap_cut_before_the_package_copy_is_finished_by_whichever_command_comes_next(release, tmp_path, monkeypatch):
    # the next command may be `init` or `release --no-package-weights`, which pass no package: the swap names its own
    package = tmp_path / 'weights' / TAG
    package.mkdir(parents=True)
    for name in atomic.PACKAGED:
        (package / name).write_bytes(b'stale')
    new = release.parent / f'.{TAG}.cycle-x'
    shutil.copytree(release, new)
    real = atomic.recover
    monkeypatch.setattr(atomic, 'recover', lambda *a, **k: (_ for _ in ()).throw(OSError('killed')))
    with pytest.raises(OSError, match='killed'):
        atomic.swap_folder(new, release, package)  # both renames done, the package copy not
    monkeypatch.undo()
    assert atomic.recover is real and (package / 'config.json').read_bytes() == b'stale'
    atomic.recover(release)
    assert all((package / f).read_bytes() == (release / f).read_bytes() for f in atomic.PACKAGED)
    assert not list(release.glob('.*')) and not [p.name for p in release.parent.iterdir() if p.name != TAG]


def test_write_atomic_keeps_the_old_file_when_the_write_fails(tmp_path, monkeypatch):
    path = tmp_path / 'f.json'
    atomic.write_atomic(path, 'old')
    monkeypatch.setattr(os, 'replace', lambda *a: (_ for _ in ()).throw(OSError('disk full')))
    with pytest.raises(OSError, match='disk full'):
        atomic.write_atomic(path, 'new')
    assert path.read_text() == 'old' and [p.name for p in tmp_path.iterdir()] == ['f.json']


# ---- command line -----------------------------------------------------------------------------------------
def test_command_line(release, run_of, capsys, tmp_path, data):
    run = run_of()
    cycle.main(['release', str(run), str(release), '--command', COMMAND, '--dry-run'])
    assert json.loads(capsys.readouterr().out)['improved'] is True
    with pytest.raises(SystemExit, match='error: .*args.yaml says'):
        cycle.main(['release', str(run), str(release), '--command', COMMAND, '--speed', 'bf16', '--dry-run'])
    (tmp_path / 'speed.json').write_text('{')
    with pytest.raises(SystemExit, match='error: cannot read .*speed.json'):
        cycle.main(['release', str(run), str(release), '--command', COMMAND, '--speed-record',
                    str(tmp_path / 'speed.json'), '--dry-run'])
    with pytest.raises(SystemExit, match='error: .*exists'):
        cycle.main(['init', str(release), str(run), '--command', FIRST, '--eval-dir', str(data)])


def test_the_module_runs_from_the_repository_root():
    out = subprocess.run([sys.executable, '-m', 'tools.cycle', '--help'], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and 'release' in out.stdout and 'init' in out.stdout


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
    assert 'anytime criterion' not in section
    anytime = {'name': 'anytime', 'val_top1_at_depth': {'3': 30.0, '6': 40.0}, 'mean_before': 34.0, 'mean': 35.0, 'mean_gain': 1.0,
               'required_mean_gain': 0.5, 'own_grid_gain': 0.2, 'own_grid_allowed_loss': 1.0, 'images': 100}
    cycles = [dict(base, cycle=0, test_top1_before=None)] + [dict(base, cycle=i, test_top1_before=39.0, criterion=anytime)
                                                             for i in (1, 2, 3)]
    assert 'Cycle 3 was decided on the anytime criterion' in cycle.card_section({'total_seconds': 60., 'cycles': cycles[:1] + cycles[3:]})
    assert 'Cycles 1, 2 and 3 were decided on the anytime criterion' in cycle.card_section({'total_seconds': 60., 'cycles': cycles})


def test_prior_run_is_the_run_whose_checkpoint_cycle_zero_started_from(tmp_path):
    before = _write_run(tmp_path / 'study', _model(0).state_dict(), rows=((0, 30.0), (1, 45.0), (2, 44.0)),
                        initial_checkpoint=None)
    assert cycle.prior_run({'args': {'initial_checkpoint': None}}) is None
    start = str(before / 'model_best.pth.tar')
    assert cycle.prior_run({'args': {'initial_checkpoint': start}}) == {
        'checkpoint': start, 'epochs': 2, 'seconds': 1800.0, 'hardware': 'Test CPU', 'val_top1': 45.0}  # epoch 1's
    elsewhere = str(tmp_path / 'downloaded.safetensors')
    assert cycle.prior_run({'args': {'initial_checkpoint': elsewhere}}) == {'checkpoint': elsewhere}


def test_card_section_says_what_cycle_zero_started_from():
    base = {'command': 'python -m timm_odevit.train', 'speed': {'setting': 'fp32'}, 'epochs': 2, 'seconds': 60.0,
            'val_top1': 75.0, 'weights': 'raw', 'best_epoch': 1, 'test_top1': 74.0, 'cycle': 0, 'test_top1_before': None}
    assert 'Cycle 0 trained from scratch;' in cycle.card_section({'total_seconds': 60.0, 'cycles': [base]})
    prior = {'checkpoint': 'runs/a/model_best.pth.tar', 'epochs': 3, 'seconds': 7200.0, 'hardware': 'Test CPU'}
    section = cycle.card_section({'total_seconds': 60.0, 'cycles': [dict(base, started_from_run=prior)]})
    assert ('Cycle 0 was a warm restart of `runs/a/model_best.pth.tar` (3 epochs, 2.0 h on Test CPU, before cycle 0 '
            'and not in the table or the total below);') in section and 'from scratch' not in section
    section = cycle.card_section({'total_seconds': 60.0, 'cycles': [dict(base, started_from_run={'checkpoint': 'w.pt'})]})
    assert 'Cycle 0 was a warm restart of `w.pt` (what trained it is not on record);' in section


def test_card_section_gives_the_noise_floor_and_what_else_the_held_out_images_chose():
    base = {'command': 'python -m timm_odevit.train', 'speed': {'setting': 'fp32'}, 'epochs': 2, 'seconds': 60.0,
            'val_top1': 75.0, 'weights': 'raw', 'best_epoch': 1, 'test_top1': 74.0}
    record = {'total_seconds': 120.0, 'selection': {'top1': 75.0, 'images': 5000},
              'cycles': [dict(base, cycle=0, test_top1_before=None), dict(base, cycle=1, test_top1_before=74.0)]}
    section = cycle.card_section(record)
    assert '(2·√(2p(1−p)/n) = 1.73 points at the last held-out top-1, n = 5,000)' in section  # 2·√2·0.612
    assert 'also chose' not in section
    section = cycle.card_section(dict(record, held_out_also_chose=['the recipe (a.json)', 'the teacher (b.json)']))
    assert 'The same images also chose: the recipe (a.json); the teacher (b.json).' in section
    assert 'test images' not in section
    section = cycle.card_section(dict(record, first_chosen_on_test=['lr 1e-3 (c.json)', 'train_depth [3, 9] (d.json)']))
    assert ("Chosen first on the test images this card's top-1 is measured on (each says whether held-out images "
            're-checked it; docs/results.md "Which images scored it"): lr 1e-3 (c.json); train_depth [3, 9] (d.json).'
            ) in section


# ---- the anytime criterion (--select-grids) -----------------------------------------------------------------
def _measured(before, after, images=20):
    return lambda *a, **k: {'images': images, 'split': 'data/val', 'before': before, 'after': after}


@pytest.mark.parametrize('rows, after, improved', [  # SE 10.95; the best of 2 epochs: the mean needs 1.18 SE, 12.9
    (((0, 39.8), (1, 40.0)), {'1': 53.0, '2': 55.0}, True),    # mean +14.0; own grid 0.0 >= -SE
    (((0, 28.0), (1, 28.5)), {'1': 53.0, '2': 55.0}, False),   # own grid -11.5: beyond its noise (10.95)
    (((0, 39.8), (1, 55.0)), {'1': 50.0, '2': 51.0}, False),   # own grid +15 but the mean only +10.5
    (((0, 39.8), (1, 55.0)), {'1': 51.0, '2': 52.0}, False),   # mean +11.5: beyond one SE, not beyond the allowance
    (((0, 39.8), (1, 55.0)), {'1': 52.0, '2': 54.0}, True),    # mean +13.0
])
def test_anytime_criterion_needs_the_mean_over_depths_and_no_loss_at_the_own_grid(release, run_of, monkeypatch,
                                                                                  rows, after, improved):
    monkeypatch.setattr(cycle, 'held_out_at_depths', _measured({'1': 38.0, '2': 42.0}, after))
    out = cycle.release_cycle(run_of(rows=rows), release, COMMAND, dry_run=True, select_grids=[1, 2])
    c = out['criterion']
    assert out['improved'] is improved and c['mean_before'] == 40.0
    assert c['required_mean_gain'] == pytest.approx(SE * cycle.selection_margin(len(rows)), abs=1e-4)  # picked of k
    assert c['own_grid_allowed_loss'] == pytest.approx(SE, abs=1e-4)  # no allowance for the pick: it favours the cycle


def test_an_anytime_release_records_the_criterion_in_record_and_card(release, run_of, data, monkeypatch):
    monkeypatch.setattr(cycle, 'held_out_at_depths', _measured({'1': 38.0, '2': 42.0}, {'1': 50.0, '2': 52.0}))
    out = cycle.release_cycle(run_of(rows=((0, 40.0),)), release, COMMAND, eval_dir=str(data), select_grids=[1, 2],
                              grids=())
    assert out['released']
    c1 = _record(release)['cycles'][1]
    assert c1['criterion']['val_top1_at_depth'] == {'1': 50.0, '2': 52.0} and c1['criterion']['mean_gain'] == 11.0
    card = (release / 'README.md').read_text()
    assert 'Cycle 1: released on the anytime criterion: mean held-out top-1 over depths 1, 2 40.00 → 51.00' in card
    assert c1['gate'] == {'needed': c1['criterion']['required_mean_gain'], 'evaluations': 1}
    assert "Every later cycle also passes today's gate." in card and 'passed on one standard error' not in card


def test_card_says_which_cycles_passed_an_older_gate_and_would_fail_todays():
    base = {'command': 'c', 'speed': {'setting': 'fp32'}, 'epochs': 9, 'seconds': 60.0, 'weights': 'ema',
            'best_epoch': 3, 'test_top1': 39.0, 'test_top1_before': 39.0}
    record = {'total_seconds': 9180.0, 'selection': {'images': 5000}, 'cycles': [
        dict(base, cycle=0, val_top1=74.18, test_top1_before=None, seconds=9000.0,
             seconds_from="the cycle's model card, rounded to 0.1 h"),
        dict(base, cycle=1, val_top1=74.94, val_top1_before=74.18),   # +0.76 < 1.30 (√(2 ln 9) SE at 74.18 %)
        dict(base, cycle=2, val_top1=77.0, val_top1_before=74.94, gate={'needed': 1.28, 'evaluations': 9}),
    ]}
    section = cycle.card_section(record)
    assert 'Cycle 1 passed on one standard error, the gate of its day.' in section
    assert "Cycle 1 (held-out gain +0.76, needed > 1.30) would not pass today's gate." in section
    assert '| ≈ 2.5 h ‡ |' in section and "‡ Cycle 0's wall time is not a measurement: the cycle's model card" in section
    # a plain cycle the tooling stamped (after the allowance came) passed on it; a cycle without its numbers is unchecked
    record['cycles'] += [dict(base, cycle=3, val_top1=79.0, val_top1_before=77.0, recorded={'commit': 'x'}),
                         dict(base, cycle=4, val_top1=80.0, recorded={'commit': 'y'})]
    section = cycle.card_section(record)
    assert 'Cycle 1 passed on one standard error' in section and 'Cycle 4 cannot be checked against it' in section
    assert 'Every later cycle' not in section and cycle._listed(['1', '2', '3']) == '1, 2 and 3'


def test_min_gain_does_not_apply_to_an_anytime_cycle(release, run_of):
    with pytest.raises(ValueError, match='min_gain does not apply'):
        cycle.release_cycle(run_of(), release, COMMAND, dry_run=True, select_grids=[1, 2], min_gain=0.5)


def test_anytime_measurement_is_both_models_on_the_runs_validation_split(release, run_of, data):
    run = cycle.read_run(run_of())
    measured = cycle.held_out_at_depths(release, cycle.best_epoch(run), cycle.held_out(run), [1, 3])
    released = timm.create_model(f'local-dir:{release}', pretrained=True)
    for key, model in (('before', released), ('after', _model(2))):
        expected = {str(r['depth']): round(r['top1'], 4) for r in evaluate_grids(model, str(data), 'val', [1, 3])}
        assert measured[key] == expected, key
    assert measured['images'] == 20
