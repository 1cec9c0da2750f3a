import pytest
import timm
import torch
import torch.nn.functional as F
from timm.task import ClassificationTask

import timm_odevit  # noqa: F401
from timm_odevit.tasks import DeepSupervisionTask, deep_supervision_loss


def test_loss_is_the_weighted_sum_of_stage_losses():
    torch.manual_seed(0)
    model = timm.create_model('bvit_tiny_cifar', stages=(3, 6, 12), stage_heads='separate', stage_weights=(1, 2, 1))
    task = DeepSupervisionTask(model, criterion=torch.nn.CrossEntropyLoss())
    x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    torch.manual_seed(1)
    out = task(x, y)
    torch.manual_seed(1)
    stage_logits = model.forward_stages(x)
    expected = 0.25 * F.cross_entropy(stage_logits[0], y) + 0.5 * F.cross_entropy(stage_logits[1], y) \
        + 0.25 * F.cross_entropy(stage_logits[2], y)
    torch.testing.assert_close(out['loss'], expected)
    torch.testing.assert_close(out['output'], stage_logits[-1])
    out['loss'].backward()
    assert all(p.grad is not None for p in model.parameters())  # every stage head is trained


def test_eval_mode_gives_the_final_loss():
    model = timm.create_model('bvit_tiny_cifar', stages=(6, 12)).eval()
    task = DeepSupervisionTask(model, criterion=torch.nn.CrossEntropyLoss())
    x, y = torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,))
    torch.testing.assert_close(task(x, y)['loss'], F.cross_entropy(model(x), y))


def test_single_stage_equals_classification():
    torch.manual_seed(0)
    model = timm.create_model('bvit_tiny_cifar')
    x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    plain = ClassificationTask(model, criterion=torch.nn.CrossEntropyLoss())(x, y)['loss']
    ds = DeepSupervisionTask(model, criterion=torch.nn.CrossEntropyLoss())(x, y)['loss']
    torch.testing.assert_close(ds, plain)


def test_weights_and_outputs_must_agree():
    with pytest.raises(ValueError, match='stage weights'):
        deep_supervision_loss([torch.zeros(1, 2)], torch.zeros(1, dtype=torch.long), F.cross_entropy, [0.5, 0.5])


def test_model_without_stages_is_rejected():
    with pytest.raises(TypeError, match='no stages'):
        DeepSupervisionTask(timm.create_model('odevit_tiny_cifar'))
