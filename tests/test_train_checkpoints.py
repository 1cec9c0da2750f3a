"""The train wrapper's --resume / --initial-checkpoint for this package's models: weights_only reads, errors naming
the file and the mismatch, DDP / torch.compile prefixes stripped; other models load exactly as timm loads them."""
import argparse
import os
import re

import pytest
import timm
import torch
from timm.models import create_model
from timm.task import ClassificationTask
from timm.task._helpers import load_task_ema_checkpoint, resume_task_checkpoint

import timm_odevit  # noqa: F401
from timm_odevit.train import checked_create_model, checked_resume


def _wrapped(state):
    """Keys as a torch.compile'd DDP model saves them."""
    return {f'_orig_mod.module.{k}': v for k, v in state.items()}


def _task(name='odevit_tiny_cifar', **kwargs):
    torch.manual_seed(1)
    return ClassificationTask(timm.create_model(name, **kwargs), criterion=torch.nn.CrossEntropyLoss())


@pytest.fixture
def wrapped_checkpoint(tmp_path):
    torch.manual_seed(0)
    model = timm.create_model('odevit_tiny_cifar', steps=2)
    args = argparse.Namespace(model='odevit_tiny_cifar')
    path = tmp_path / 'last.pth.tar'
    torch.save({'epoch': 1, 'version': 2, 'args': args, 'state_dict': _wrapped(model.state_dict()),
                'state_dict_ema': _wrapped(model.state_dict())}, path)
    return model, path


def test_resume_strips_wrapper_prefixes(wrapped_checkpoint):
    model, path = wrapped_checkpoint
    task = _task(steps=2)
    assert checked_resume(resume_task_checkpoint)(task, str(path)) == 2
    torch.testing.assert_close(task.get_eval_model().state_dict(), model.state_dict())
    task.setup_ema(decay=0.9)
    checked_resume(load_task_ema_checkpoint, ema=True)(task, str(path))


@pytest.mark.parametrize('make,words', [
    (lambda p: None, 'does not exist'),
    (lambda p: p.mkdir(), 'is a directory'),
    (lambda p: p.write_bytes(b'PK\x03\x04 cut'), 'not a readable PyTorch checkpoint'),
    (lambda p: torch.save({'state_dict': timm.create_model('bvit_tiny_cifar').state_dict()}, p), 'missing keys'),
    (lambda p: torch.save({'state_dict': {}, 'args': _Crafted(p)}, p), 'refused'),
])
def test_bad_resume_checkpoints_stop_with_an_error_naming_the_file(tmp_path, make, words):
    path = tmp_path / 'c.pth.tar'
    make(path)
    with pytest.raises(SystemExit, match=f'error: .*{re.escape(str(path))}.*{words}|error: .*{words}.*{path.name}'):
        checked_resume(resume_task_checkpoint)(_task(steps=2), str(path))
    assert not (tmp_path / 'ran').exists()


class _Crafted:
    def __init__(self, path):
        self.marker = str(path.parent / 'ran')

    def __reduce__(self):
        return os.system, (f'touch {self.marker}',)


def test_other_models_resume_as_timm_resumes_them(tmp_path):
    model = timm.create_model('resnet10t', num_classes=3)
    torch.save({'epoch': 0, 'version': 2, 'state_dict': model.state_dict()}, tmp_path / 'r.pth.tar')
    task = _task('resnet10t', num_classes=3)
    assert checked_resume(resume_task_checkpoint)(task, str(tmp_path / 'r.pth.tar')) == 1
    with pytest.raises(FileNotFoundError):  # timm's own behaviour stands
        checked_resume(resume_task_checkpoint)(task, str(tmp_path / 'missing.pth.tar'))


def test_initial_checkpoint_strips_wrapper_prefixes_and_names_the_file(wrapped_checkpoint, tmp_path):
    model, path = wrapped_checkpoint
    create = checked_create_model(create_model)
    loaded = create('odevit_tiny_cifar', steps=2, checkpoint_path=str(path))
    torch.testing.assert_close(loaded.state_dict(), model.state_dict())
    (tmp_path / 'cut.pth').write_bytes(path.read_bytes()[:1000])
    with pytest.raises(SystemExit, match=r'error: --initial-checkpoint .*cut.pth.* not a readable'):
        create('odevit_tiny_cifar', steps=2, checkpoint_path=str(tmp_path / 'cut.pth'))
    with pytest.raises(SystemExit, match=r'error: --initial-checkpoint .*last.pth.tar.*shape mismatches.*head'):
        create('odevit_tiny_cifar', steps=2, num_classes=5, checkpoint_path=str(path))
    resnet = timm.create_model('resnet10t', num_classes=3)
    torch.save(resnet.state_dict(), tmp_path / 'r.pth')
    torch.testing.assert_close(create('resnet10t', num_classes=3, checkpoint_path=str(tmp_path / 'r.pth')).state_dict(),
                               resnet.state_dict())
