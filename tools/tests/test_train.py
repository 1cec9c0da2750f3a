"""``python -m tools.train``: the package's train wrapper plus train_time.json and a summary.csv kept one table across
``--resume``; an end-to-end kill and resume of timm's real train.py on random images."""
import json
import pathlib
import subprocess
import sys

import pytest
import torch
from timm import utils

from timm_odevit import _checks
from timm_odevit.cli.scripts import locate_script
from tools import train

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _has_train_py() -> bool:
    try:
        return bool(locate_script('train.py', download=False))
    except FileNotFoundError:
        return False


def test_each_epoch_keeps_the_machine_it_ran_on_across_a_resume_with_other_threads(tmp_path):
    """A resume with another thread count keeps each epoch's machine, and ``hardware`` (what cards and records read)
    names both, not the last one alone."""
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        train.record_train_time(tmp_path, 0)
        torch.set_num_threads(2)
        train.record_train_time(tmp_path, 1)
    finally:
        torch.set_num_threads(threads)
    record = json.loads((tmp_path / 'train_time.json').read_text())
    assert record['epoch_hardware']['0'].endswith(' 1 threads') and record['epoch_hardware']['1'].endswith(' 2 threads')
    assert record['hardware'] == f"{record['epoch_hardware']['0']} / {record['epoch_hardware']['1']}"  # both named


def test_a_cut_train_time_record_is_named(tmp_path):
    train.record_train_time(tmp_path, 0)
    train.record_train_time(tmp_path, 1)
    assert set(json.loads((tmp_path / 'train_time.json').read_text())['epochs']) == {'0', '1'}
    (tmp_path / 'train_time.json').write_text('{"epochs": {"0": 12.')
    with pytest.raises(ValueError, match=f'cannot read {tmp_path / "train_time.json"}'):
        train.record_train_time(tmp_path, 2)


def test_a_resumed_run_that_fails_while_dropping_rows_keeps_the_summary(tmp_path, monkeypatch):
    """summary.csv is replaced whole when the rows of re-run epochs are dropped: a failure leaves the old table."""
    module = type('TrainPy', (), {'utils': utils})
    train.add_records(module)
    path = tmp_path / 'summary.csv'
    path.write_bytes(b'epoch,train_loss\r\n0,2.0\r\n1,1.5\r\n')

    def fail(*args):
        raise OSError('disk full')
    monkeypatch.setattr(_checks.os, 'replace', fail)
    with pytest.raises(OSError, match='disk full'):
        module.utils.update_summary(1, {'loss': 1.2}, {}, str(path))
    assert path.read_bytes() == b'epoch,train_loss\r\n0,2.0\r\n1,1.5\r\n'
    assert [p.name for p in tmp_path.iterdir()] == ['summary.csv']


@pytest.fixture(scope='module')
def random_imagefolder(tmp_path_factory):
    """4 classes x 12 train / 2 val random 32 px images."""
    import numpy as np
    from PIL import Image
    root = tmp_path_factory.mktemp('random')
    rng = np.random.default_rng(0)
    for split, n in (('train', 12), ('val', 2)):
        for c in ('a', 'b', 'c', 'd'):
            (root / split / c).mkdir(parents=True)
            for i in range(n):
                Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(root / split / c / f'{i}.png')
    return root


@pytest.mark.skipif(not _has_train_py(), reason="timm's train.py not found (../shared/timm beside the checkout)")
def test_e2e_resume_after_kill_keeps_steps_summary_and_time(random_imagefolder, tmp_path):
    """train.py killed during epoch 1, restarted with --resume (timm's own resume): the same optimiser steps in total
    as an uninterrupted run, summary.csv one table with one row per epoch, the wall time summed across both runs."""
    args = [sys.executable, '-m', 'tools.train', '--model', 'odevit_tiny_cifar', '--model-kwargs', 'steps=2',
            '--num-classes', '4', '--data-dir', str(random_imagefolder), '--train-split', 'train', '--val-split', 'val',
            '--epochs', '3', '-b', '12', '--opt', 'adamw', '--workers', '0', '--output', str(tmp_path),
            '--experiment', 'e2e', '--log-interval', '1']  # AdamW counts its steps
    run = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    log = []
    for line in run.stdout:  # kill it as soon as epoch 1 has made a step (epoch 0 is checkpointed)
        log.append(line)
        if 'Train: 1 [' in line:
            run.kill()
            break
    run.wait(timeout=60)
    assert run.returncode != 0 and any('Train: 1 [' in line for line in log), ''.join(log[-40:])
    out = tmp_path / 'e2e'
    resumed = subprocess.run(args + ['--resume', str(out / 'last.pth.tar')], capture_output=True, text=True,
                             timeout=900, cwd=ROOT)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    summary = (out / 'summary.csv').read_text().splitlines()
    assert summary[0].startswith('epoch,') and [row.split(',')[0] for row in summary[1:]] == ['0', '1', '2']
    state = torch.load(out / 'last.pth.tar', map_location='cpu', weights_only=False)
    steps_per_epoch = 48 // 12  # 12 images per class, drop_last
    assert {int(s['step']) for s in state['optimizer']['state'].values()} == {3 * steps_per_epoch}
    assert state['epoch'] == 2
    timing = json.loads((out / 'train_time.json').read_text())
    assert sorted(timing['epochs']) == ['0', '1', '2'] and timing['seconds'] == pytest.approx(
        sum(timing['epochs'].values())) and 'CPU cores' in timing['hardware']
