"""The discrete ViTs matched to odevit_tiny_cifar: parameters within ±5 %, FLOPs at its trained grid."""
import pytest
import timm
import torch
from torch.utils.flop_counter import FlopCounterMode

import timm_odevit  # noqa: F401
from timm_odevit.models.baselines import ODEVIT_TINY_TRAINED_STEPS


def _params(model):
    return sum(p.numel() for p in model.parameters())


def _flops(model):
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model.eval()(torch.randn(1, 3, 32, 32))
    return counter.get_total_flops()


@pytest.fixture(scope='module')
def odevit():
    return timm.create_model('odevit_tiny_cifar', steps=ODEVIT_TINY_TRAINED_STEPS)


def test_params_matched_within_5_percent(odevit):
    vit = timm.create_model('vit_odevit_tiny_cifar_params_matched')
    assert abs(_params(vit) / _params(odevit) - 1) <= 0.05
    assert len(vit.blocks) == 4 and vit.embed_dim == odevit.embed_dim // 2
    assert vit.num_prefix_tokens == odevit.num_prefix_tokens  # [CLS] + the same 10 registers


def test_flops_matched_at_trained_grid(odevit):
    vit = timm.create_model('vit_odevit_tiny_cifar_flops_matched')
    assert abs(_flops(vit) / _flops(odevit) - 1) < 0.01
    assert len(vit.blocks) == ODEVIT_TINY_TRAINED_STEPS and vit.embed_dim == odevit.embed_dim
    assert _params(vit) > 5 * _params(odevit)


@pytest.mark.parametrize('name', ['vit_odevit_tiny_cifar_params_matched', 'vit_odevit_tiny_cifar_flops_matched'])
def test_registered_as_timm_models(name):
    assert name in timm.list_models(module='baselines')
    model = timm.create_model(name, num_classes=3)
    assert model.pretrained_cfg['input_size'] == (3, 32, 32)
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 3)
