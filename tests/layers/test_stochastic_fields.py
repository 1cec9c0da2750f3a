"""ContinuousDepthStack refuses random fields where the gradient or the step control would be silently wrong."""
import pytest
import torch
from timm.layers import DropPath
from timm.models.vision_transformer import Block
from torch import nn

from timm_odevit.layers import ContinuousDepthStack, ODEViTField, SolverConfig
from timm_odevit.layers.block_fields import BlockField
from timm_odevit.layers.diagnostics import active_stochastic_modules


def _block(adjoint=False, method='euler', **drops):
    torch.manual_seed(0)
    field = ODEViTField(16, 2, mlp_ratio=2., depth_scale=1., **drops)
    return ContinuousDepthStack(field, SolverConfig(method=method, steps=4, adjoint=adjoint))


@pytest.mark.parametrize('drop', ['attn_drop', 'proj_drop', 'drop_path'])
def test_adjoint_with_active_dropout_is_refused(drop):
    # the adjoint backward re-samples the masks: its gradient differs from direct backprop
    block = _block(adjoint=True, **{drop: 0.1}).train()
    with pytest.raises(ValueError, match=r'random in training mode \(active: .*re-samples the dropout masks.*'
                                         r'drop rates to 0.*adjoint=False'):
        block(torch.randn(1, 3, 16))


@pytest.mark.parametrize('method', ['dopri5', 'bosh3', 'adaptive_heun'])
def test_adaptive_solver_with_active_dropout_is_refused(method):
    block = _block(method=method, proj_drop=0.1).train()
    with pytest.raises(ValueError, match=f"adaptive '{method}' would control its step size on the dropout noise.*"
                                         'fixed-grid method'):
        block(torch.randn(1, 3, 16))


def test_drop_path_of_a_timm_block_is_found():
    block = ContinuousDepthStack(BlockField(Block(16, 2, drop_path=0.1)), SolverConfig(steps=2, adjoint=True)).train()
    assert active_stochastic_modules(block.field) == ['block.drop_path1', 'block.drop_path2']
    with pytest.raises(ValueError, match='block.drop_path1, block.drop_path2'):
        block(torch.randn(1, 3, 16))


def test_deterministic_cases_still_run():
    x = torch.randn(1, 3, 16, requires_grad=True)
    _block(adjoint=True, proj_drop=0.1, drop_path=0.1).eval()(x).sum().backward()  # eval: no masks
    _block(adjoint=True).train()(x).sum().backward()  # drop rates 0
    _block(method='dopri5', attn_drop=0.).train()(x)
    _block(proj_drop=0.1, drop_path=0.1).train()(x).sum().backward()  # direct backprop on a fixed grid
    assert active_stochastic_modules(nn.Sequential(nn.Dropout(0.), DropPath(0.))) == []


def test_switching_the_solver_is_checked_at_forward_time():
    block = _block(proj_drop=0.1).train()
    x = torch.randn(1, 3, 16)
    block(x)
    block.set_solver(adjoint=True)
    with pytest.raises(ValueError, match='adjoint'):
        block(x)
    block.eval()(x)
