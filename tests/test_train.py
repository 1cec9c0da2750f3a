"""The train.py entry point: locating timm's script, configs, and end-to-end runs of the REAL
train.py (these run when TIMM_TRAIN_PY points at a timm checkout's train.py, else skip)."""
import glob
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import timm
import torch
import yaml

import timm_odevit  # noqa: F401
from timm_odevit.train import _check_image_folder, locate_script

ROOT = pathlib.Path(__file__).resolve().parents[1]
CIFAR = ROOT.parent / 'shared' / 'data' / 'cifar10'
TRAIN_PY = os.environ.get('TIMM_TRAIN_PY')


def test_explicit_path_that_does_not_exist(tmp_path):
    with pytest.raises(FileNotFoundError, match='not found'):
        locate_script('train.py', str(tmp_path / 'train.py'))


def test_no_train_py_gives_instructions(tmp_path, monkeypatch):
    monkeypatch.delenv('TIMM_TRAIN_PY', raising=False)
    monkeypatch.setenv('TIMM_ODEVIT_CACHE', str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r'git clone --branch v.*--timm-train'):
        locate_script('train.py', download=False)


def test_cached_script_is_found(tmp_path, monkeypatch):
    monkeypatch.delenv('TIMM_TRAIN_PY', raising=False)
    monkeypatch.setenv('TIMM_ODEVIT_CACHE', str(tmp_path))
    cached = tmp_path / f'timm-{timm.__version__}' / 'validate.py'
    cached.parent.mkdir(parents=True)
    cached.write_text('# stub')
    assert locate_script('validate.py', download=False) == cached


def test_data_dir_without_images(tmp_path):
    (tmp_path / 'train' / 'cat').mkdir(parents=True)
    with pytest.raises(SystemExit, match='no images under'):
        _check_image_folder(['--data-dir', str(tmp_path)])
    with pytest.raises(SystemExit, match='does not exist'):
        _check_image_folder(['--data-dir', str(tmp_path / 'nope')])
    _check_image_folder(['--dataset', 'torch/cifar10', '--data-dir', str(tmp_path)])  # not an ImageFolder


@pytest.mark.parametrize('path', sorted(glob.glob(str(ROOT / 'train_configs' / '*.yaml'))), ids=os.path.basename)
def test_train_configs_name_a_claim_and_build(path):
    text = pathlib.Path(path).read_text()
    assert '# Claim:' in text and '# Cost' in text
    cfg = yaml.safe_load(text)
    with torch.device('meta'):
        model = timm.create_model(cfg['model'], num_classes=cfg.get('num_classes'), **(cfg.get('model_kwargs') or {}))
    assert model.num_classes == cfg['num_classes']


# ---- end-to-end with timm's real train.py ---------------------------------------------------------
needs_train_py = pytest.mark.skipif(not TRAIN_PY, reason='set TIMM_TRAIN_PY to a timm checkout train.py to run')


@pytest.fixture(scope='module')
def small_imagefolder(tmp_path_factory):
    if not CIFAR.is_dir():
        pytest.skip(f'CIFAR-10 ImageFolder not found at {CIFAR}')
    root = tmp_path_factory.mktemp('cifar_small')
    for split, n in (('train', 12), ('test', 4)):
        for c in sorted(os.listdir(CIFAR / split)):
            (root / split / c).mkdir(parents=True)
            for f in sorted(os.listdir(CIFAR / split / c))[:n]:
                shutil.copy(CIFAR / split / c / f, root / split / c / f)
    return root


def _train(args, out):
    cmd = [sys.executable, '-m', 'timm_odevit.train', *args, '--epochs', '1', '-b', '24', '--workers', '0',
           '--output', str(out), '--experiment', 'e2e', '--log-interval', '1']
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = (out / 'e2e' / 'summary.csv').read_text().splitlines()
    assert len(summary) == 2 and 'eval_top1' in summary[0]
    assert (out / 'e2e' / 'last.pth.tar').exists()
    return result.stdout + result.stderr


@needs_train_py
def test_e2e_odevit(small_imagefolder, tmp_path):
    _train(['--model', 'odevit_tiny_cifar', '--model-kwargs', 'steps=2', '--data-dir', str(small_imagefolder),
            '--train-split', 'train', '--val-split', 'test'], tmp_path)


@needs_train_py
def test_e2e_bvit_deep_supervision(small_imagefolder, tmp_path):
    log = _train(['--model', 'bvit_tiny_cifar', '--model-kwargs', 'stages=(2,4)', 'iterations=4',
                  '--data-dir', str(small_imagefolder), '--train-split', 'train', '--val-split', 'test'], tmp_path)
    assert 'DeepSupervisionTask' in log


@needs_train_py
def test_e2e_trajectory_distillation(small_imagefolder, tmp_path):
    teacher = timm.create_model('vit_tiny_patch16_224', num_classes=10)  # a "fine-tuned" teacher saved locally
    ckpt = tmp_path / 'teacher.pth'
    torch.save(teacher.state_dict(), ckpt)
    log = _train(['--model', 'odevit_tiny_cifar', '--model-kwargs', 'steps=12',
                  '--data-dir', str(small_imagefolder), '--train-split', 'train', '--val-split', 'test',
                  '--kd-model-name', 'vit_tiny_patch16_224', '--kd-teacher-checkpoint', str(ckpt),
                  '--kd-distill-type', 'trajectory', '--kd-mapping', 'arclength'], tmp_path)
    assert 'TrajectoryDistillationTask' in log and 'calibrated arclength mapping' in log
