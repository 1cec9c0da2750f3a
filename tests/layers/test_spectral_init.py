import pytest
import timm
import torch
from torch import nn

from timm_odevit.layers import spectral_init_


def _linear_and_conv_weights(model):
    return [(n, m.weight) for n, m in model.named_modules() if isinstance(m, (nn.Linear, nn.Conv2d))]


@pytest.mark.parametrize('name,kwargs', [
    ('odevit_tiny_cifar', {}),
    ('odevit_tiny_cifar', {'attn_type': 'l2'}),
    ('odevit_small_cifar', {}),
])
def test_every_weight_has_spectral_norm_one(name, kwargs):
    model = timm.create_model(name, head_init='spectral', **kwargs)  # the reference's init (default: timm's head)
    weights = _linear_and_conv_weights(model)
    assert any(n.endswith('attn.qkv') or n.endswith('attn.qk') for n, _ in weights)  # in-projection included
    for n, w in weights:
        sigma = torch.linalg.matrix_norm(w.detach().flatten(1), ord=2).item()
        assert sigma <= 1 + 1e-4, f'{n}: spectral norm {sigma}'
        assert sigma >= 1 - 1e-4, f'{n}: spectral norm {sigma} (should be normalised to 1)'


def test_spectral_init_zeroes_biases():
    lin = nn.Linear(8, 4)
    spectral_init_(lin)
    assert torch.count_nonzero(lin.bias) == 0
