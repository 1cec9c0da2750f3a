"""Anytime training (ContinuousDepthStack.set_train_depth): a depth drawn per training forward."""
import copy

import pytest
import torch
from timm.models.vision_transformer import Block

from timm_odevit.layers import BlockField, ContinuousDepthStack, ODEViTField, SolverConfig


def _stack(steps=4, method='euler', **solver):
    torch.manual_seed(0)
    field = ODEViTField(16, 2, mlp_ratio=2., depth_scale=2.).double()
    return ContinuousDepthStack(field, SolverConfig(method=method, steps=steps, **solver))


def _x():
    return torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


def _draws(lo, hi, seed, n):
    torch.manual_seed(seed)
    return [int(torch.randint(lo, hi + 1, ())) for _ in range(n)]


@pytest.mark.parametrize('method', ['euler', 'rk4'])
def test_a_training_forward_is_the_fixed_grid_integration_at_the_drawn_depth(method):
    stack, x = _stack(method=method), _x()
    stack.set_train_depth((2, 7))
    expected_depths = _draws(2, 7, seed=3, n=12)
    torch.manual_seed(3)
    for depth in expected_depths:
        out = stack.train()(x)
        fixed = copy.deepcopy(stack).eval()
        fixed.set_train_depth(None)
        fixed.set_solver(steps=depth)  # same horizon [0, 1], h = 1 / depth
        assert torch.equal(out, fixed(x)), depth
        assert stack.nfe == depth * (4 if method == 'rk4' else 1)
    assert len(set(expected_depths)) > 3  # the draws vary (and cover the range over a run)


def test_every_depth_in_the_range_is_drawn_and_nothing_outside():
    stack, x = _stack(steps=1), _x()[:, :2]
    stack.set_train_depth([1, 3])  # a list, as a YAML config gives it
    seen = set()
    torch.manual_seed(0)
    with torch.no_grad():
        for _ in range(60):
            stack.train()(x)
            seen.add(stack.nfe)
    assert seen == {1, 2, 3}


def test_eval_mode_and_slices_use_the_configured_grid():
    stack, x = _stack(steps=4), _x()
    reference = copy.deepcopy(stack).eval()
    stack.set_train_depth((1, 9))
    assert torch.equal(stack.eval()(x), reference(x)) and stack.nfe == 4
    stack.train()
    assert stack[:2].train_depth is None  # a slice is its own fixed horizon, as timm's blocks[:n]
    assert stack.train_depth == (1, 9) and 'train_depth=1..9 steps' in repr(stack)


def test_gradients_flow_through_the_drawn_integration():
    stack, x = _stack(), _x()
    stack.set_train_depth((2, 3))
    stack.train()(x).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in stack.field.parameters() if p.requires_grad)


def test_grad_checkpointing_gives_the_same_gradients_at_the_drawn_depth():
    grads = []
    for checkpointing in (False, True):
        stack, x = _stack(), _x()
        stack.set_train_depth((2, 5))
        stack.grad_checkpointing = checkpointing
        torch.manual_seed(5)
        stack.train()(x).square().sum().backward()
        grads.append([p.grad.clone() for p in stack.field.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


def test_recurrence_draws_iterations():
    torch.manual_seed(0)
    block = Block(16, 2).eval()
    stack = ContinuousDepthStack(BlockField(block), SolverConfig('recurrence', steps=4))
    stack.set_train_depth((2, 6))
    x = torch.randn(1, 3, 16)
    torch.manual_seed(2)
    depth = _draws(2, 6, seed=2, n=1)[0]
    torch.manual_seed(2)
    with torch.no_grad():
        out = stack.train()(x)
        z = x
        for _ in range(depth):
            z = block(z)
    torch.testing.assert_close(out, z)
    assert stack.nfe == depth
    assert len(stack) == 4  # the configured depth is untouched


def test_the_horizon_dial_keeps_the_step_length():
    stack, x = _stack(steps=4, t_end=4.0), _x()  # h = 1
    stack.set_train_depth((2, 6), dial='horizon')
    depth = _draws(2, 6, seed=4, n=1)[0]
    torch.manual_seed(4)
    out = stack.train()(x)
    fixed = copy.deepcopy(stack).eval()
    fixed.set_train_depth(None)
    fixed.set_solver(t_end=float(depth))  # [0, depth] with h = 1: `depth` steps
    assert len(fixed) == depth and torch.equal(out, fixed(x)) and stack.nfe == depth


@pytest.mark.parametrize('bad', [(0, 3), (5, 3), (1.5, 3), (True, 3), 'ab', (3,), (1, 2, 3), 7])
def test_bad_ranges_are_refused(bad):
    with pytest.raises(ValueError, match='train_depth must be two integers'):
        _stack().set_train_depth(bad)


def test_a_range_beyond_the_solvers_step_cap_is_refused():
    with pytest.raises(ValueError, match='max_steps'):
        _stack(max_steps=8).set_train_depth((2, 9))


def test_unknown_dial_and_adaptive_solvers_are_refused():
    with pytest.raises(ValueError, match='Unknown train depth dial'):
        _stack().set_train_depth((2, 3), dial='iterations')
    with pytest.raises(ValueError, match='chooses its own steps'):
        _stack(method='dopri5').set_train_depth((2, 3))
    stack = _stack()
    stack.set_train_depth((2, 3))
    stack.set_solver(method='dopri5')  # changed afterwards: the training forward says so
    with pytest.raises(ValueError, match='chooses its own steps'):
        stack.train()(_x())
    stack.eval()(_x())  # eval integrates the configured (adaptive) solver as before


def test_a_forward_that_steps_through_hooked_intervals_is_refused_in_training():
    stack, x = _stack(), _x()
    stack.set_train_depth((2, 3))
    handle = stack[1].register_forward_hook(lambda *a: None)
    with pytest.raises(ValueError, match=r'but intervals 1 carry hooks on the configured grid .*: read intervals .* '
                                         'in eval mode'):
        stack.train()(x)
    stack.eval()(x)  # eval: the configured grid, hooks fire as ever
    handle.remove()
    stack.train()(x)


def test_timms_grad_checkpointing_of_an_odeified_vit_is_named_and_the_stacks_own_works():
    import timm
    import timm_odevit  # noqa: F401
    model = timm.create_model('vit_odeified', base='vit_tiny_patch16_224', img_size=32, patch_size=8, depth=3,
                              num_classes=10, embed_dim=32, num_heads=2)
    model.blocks.set_train_depth((1, 3))
    model.set_grad_checkpointing(True)  # timm's: checkpoint_seq steps through the intervals
    with pytest.raises(ValueError, match="timm's grad checkpointing.*set blocks.grad_checkpointing = True"):
        model.train()(torch.randn(2, 3, 32, 32))
    model.set_grad_checkpointing(False)
    model.blocks.grad_checkpointing = True
    model(torch.randn(2, 3, 32, 32)).sum().backward()
    assert all(p.grad is not None for p in model.blocks.field.parameters())


def test_turning_it_off_restores_the_fixed_grid_training_forward():
    stack, x = _stack(steps=3), _x()
    reference = copy.deepcopy(stack).train()
    stack.set_train_depth((1, 9))
    stack.set_train_depth(None)
    assert stack.train_depth is None and torch.equal(stack.train()(x), reference(x)) and stack.nfe == 3


def test_a_grid_changed_in_eval_mode_reads_intervals_without_the_training_refusal():
    """eval(), then more steps: the new intervals are in eval mode, so stepping through them (hooks,
    forward_intermediates) is the configured grid, not refused as a drawn training forward."""
    stack, x = _stack(steps=3), _x()
    stack.set_train_depth((2, 5))
    stack.eval()
    stack.set_solver(steps=6)
    out = x
    for interval in stack:
        out = interval(out)
    torch.testing.assert_close(out, stack(x))


def test_torch_compile_compiles_one_graph_per_drawn_depth():
    """Inductor on CPU: the drawn depth is a Python int outside the graph, each depth its own graph."""
    import torch._dynamo
    torch._dynamo.reset()
    torch.manual_seed(0)
    stack = ContinuousDepthStack(ODEViTField(8, 2, mlp_ratio=1., depth_scale=2.), SolverConfig(steps=2)).train()
    stack.set_train_depth((2, 3))
    compiled = torch.compile(stack, backend='inductor')
    x = torch.randn(1, 3, 8)
    seen = {}
    for seed in range(8):
        torch.manual_seed(seed)
        out = compiled(x)
        depth = stack.nfe
        torch.manual_seed(seed)
        torch.testing.assert_close(out, stack(x), rtol=1e-5, atol=1e-5)
        seen[depth] = out
    assert set(seen) == {2, 3}
    out.sum().backward()
    assert all(p.grad is not None for p in stack.field.parameters() if p.requires_grad)
    torch._dynamo.reset()


def test_compiling_a_drawn_depth_with_fullgraph_says_what_works():
    """torch.compile(fullgraph=True) cannot compile the draw: the error names train_depth and what compiles."""
    import timm
    import timm_odevit  # noqa: F401
    torch.manual_seed(0)
    model = timm.create_model('odevit_tiny_cifar', embed_dim=32, num_heads=2, steps=2, train_depth=(1, 2)).train()
    words = (r'train_depth draws the depth of every training forward in Python.*compile without fullgraph=True.*'
             r'or train on a fixed grid \(set_train_depth\(None\)\)')
    with pytest.raises(Exception, match=words):
        torch.compile(model, fullgraph=True, backend='eager')(torch.randn(2, 3, 32, 32))
