import math

import pytest
import torch

from timm_odevit.layers import ODEAttention


def _explicit(attn, x):
    attn.fused_attn = False
    return attn(x)


@pytest.mark.parametrize('attn_type', ['softmax', 'l2'])
def test_fused_and_explicit_paths_agree(attn_type):
    torch.manual_seed(0)
    attn = ODEAttention(32, num_heads=4, attn_type=attn_type).eval()
    x = torch.randn(2, 9, 32)
    attn.fused_attn = True
    fused = attn(x)
    torch.testing.assert_close(fused, _explicit(attn, x), rtol=1e-5, atol=1e-5)


def test_l2_attention_matches_definition_and_is_tied():
    torch.manual_seed(0)
    D, H = 16, 2
    attn = ODEAttention(D, num_heads=H, attn_type='l2').eval()
    assert not hasattr(attn, 'qkv') and attn.qk.weight.shape == (D, D)  # one matrix for W_Q = W_K
    x = torch.randn(1, 5, D)
    probs = attn.attention_probs(x)
    q = attn.qk(x).reshape(1, 5, H, D // H).transpose(1, 2)
    dist2 = (q.unsqueeze(-2) - q.unsqueeze(-3)).pow(2).sum(-1)  # ‖q_i − q_j‖²
    expected = torch.softmax(-dist2 / math.sqrt(D // H), dim=-1)
    torch.testing.assert_close(probs, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('attn_type', ['softmax', 'l2'])
def test_attention_probs_drive_the_output(attn_type):
    torch.manual_seed(0)
    attn = ODEAttention(16, num_heads=2, attn_type=attn_type).eval()
    x = torch.randn(2, 5, 16)
    probs = attn.attention_probs(x)
    v = (attn.qkv(x)[..., 32:] if attn_type == 'softmax' else attn.v(x)).reshape(2, 5, 2, 8).transpose(1, 2)
    expected = attn.proj((probs @ v).transpose(1, 2).reshape(2, 5, 16))
    torch.testing.assert_close(attn(x), expected, rtol=1e-5, atol=1e-6)


def test_attention_is_bias_free_by_default():
    attn = ODEAttention(16, num_heads=2)
    assert attn.qkv.bias is None and attn.proj.bias is None


def test_bad_attention_arguments():
    with pytest.raises(ValueError, match='attn_type'):
        ODEAttention(16, 2, attn_type='linear')
    with pytest.raises(AssertionError, match='divisible'):  # timm's Attention
        ODEAttention(10, 3)


def test_softmax_attention_is_timms_and_the_released_weights_load_strictly():
    import pathlib
    import timm
    from safetensors.torch import load_file
    attn = ODEAttention(16, 2)
    assert isinstance(attn, timm.layers.Attention) and set(attn.state_dict()) == {'qkv.weight', 'proj.weight'}
    assert set(ODEAttention(16, 2, attn_type='l2').state_dict()) == {'qk.weight', 'v.weight', 'proj.weight'}
    release = pathlib.Path(__file__).resolve().parents[2] / 'release' / 'odevit_tiny_cifar.c10' / 'model.safetensors'
    if release.is_file():
        timm.create_model('odevit_tiny_cifar', steps=6).load_state_dict(load_file(str(release)), strict=True)
