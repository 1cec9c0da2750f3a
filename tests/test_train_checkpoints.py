"""train.py's --resume and --initial-checkpoint are timm's own (the wrapper leaves them as they are); pinned here for
this package's models: DDP / torch.compile prefixes stripped, weights_only reads, mismatches named by torch."""
import argparse
import os
import pickle

import pytest
import timm
import torch
from timm.models import create_model
from timm.task import ClassificationTask
from timm.task._helpers import load_task_ema_checkpoint, resume_task_checkpoint

import timm_odevit  # noqa: F401


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
    assert resume_task_checkpoint(task, str(path)) == 2
    torch.testing.assert_close(task.get_eval_model().state_dict(), model.state_dict())
    task.setup_ema(decay=0.9)
    load_task_ema_checkpoint(task, str(path))


def test_initial_checkpoint_strips_wrapper_prefixes_and_names_a_mismatch(wrapped_checkpoint):
    model, path = wrapped_checkpoint
    loaded = create_model('odevit_tiny_cifar', steps=2, checkpoint_path=str(path))
    torch.testing.assert_close(loaded.state_dict(), model.state_dict())
    with pytest.raises(RuntimeError, match='size mismatch for head.weight'):
        create_model('odevit_tiny_cifar', steps=2, num_classes=5, checkpoint_path=str(path))
    torch.save({'state_dict': timm.create_model('bvit_tiny_cifar').state_dict()}, path)
    with pytest.raises(RuntimeError, match='Missing key'):
        resume_task_checkpoint(_task(steps=2), str(path))


class _Crafted:
    def __init__(self, path):
        self.marker = str(path.parent / 'ran')

    def __reduce__(self):
        return os.system, (f'touch {self.marker}',)


def test_a_crafted_checkpoint_is_refused_before_it_runs(tmp_path):
    path = tmp_path / 'c.pth.tar'
    torch.save({'state_dict': {}, 'args': _Crafted(path)}, path)
    with pytest.raises(pickle.UnpicklingError):
        resume_task_checkpoint(_task(steps=2), str(path))
    with pytest.raises(RuntimeError, match='weights_only=True blocked'):
        create_model('odevit_tiny_cifar', steps=2, checkpoint_path=str(path))
    assert not (tmp_path / 'ran').exists()
