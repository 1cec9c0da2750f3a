import torch

from timm_odevit.layers import CenterNorm


def test_center_norm_formula():
    torch.manual_seed(0)
    D = 7
    norm = CenterNorm(D)
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    x = torch.randn(3, 5, D)
    expected = norm.weight * (D / (D - 1)) * (x - x.mean(-1, keepdim=True)) + norm.bias
    torch.testing.assert_close(norm(x), expected)


def test_center_norm_does_not_divide_by_variance():
    norm = CenterNorm(4)
    x = torch.tensor([[1., 2., 3., 6.]])
    # LayerNorm would give the same output for 10·x; CenterNorm scales with x (Lipschitz, not scale-invariant)
    torch.testing.assert_close(norm(10 * x), 10 * norm(x))
    torch.testing.assert_close(norm(x).sum(), torch.tensor(0.))


def test_center_norm_rejects_dim_one():
    import pytest
    with pytest.raises(ValueError, match='dim >= 2'):
        CenterNorm(1)
