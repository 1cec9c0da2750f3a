"""ContinuousDepthStack: one shared field over L intervals, seen by timm as a sequence of blocks."""
import copy

import pytest
import torch
import torchdiffeq
from timm.models.vision_transformer import Block

from timm_odevit.layers import BlockField, ContinuousDepthStack, DepthInterval, ODEViTField, SolverConfig
from timm_odevit.layers.solver import ADAMS_METHODS, METHODS


def _stack(method='euler', steps=4, t_end=1.0, dim=16, **kw):
    torch.manual_seed(0)
    field = ODEViTField(dim, 2, mlp_ratio=2., depth_scale=2., **kw).double().eval()
    return ContinuousDepthStack(field, SolverConfig(method=method, steps=steps, t_end=t_end))


def _x(dim=16):
    torch.manual_seed(1)
    return torch.randn(2, 5, dim, dtype=torch.float64)


@pytest.mark.parametrize('method', [m for m in METHODS if m != 'recurrence'])
def test_the_intervals_are_the_methods_own_solution_at_the_grid_points(method):
    """Interval by interval (hooks, forward_intermediates) and stack(x) give the states of one torchdiffeq solve to
    every grid point: Runge–Kutta steps (ours) or one odeint call carrying the Adams history / adaptive step size."""
    stack, x = _stack(method), _x()
    tol = dict(rtol=stack.solver.rtol, atol=stack.solver.atol)
    with torch.no_grad():
        states = stack.trajectory(x, list(range(4)))
        nfe = stack.nfe
        expected = torchdiffeq.odeint(stack.field, x, stack.solver.grid(dtype=torch.float64), method=method, **tol)
        torch.testing.assert_close(states, expected[1:], rtol=1e-12, atol=1e-12)
        z = x
        for i, interval in enumerate(stack):
            z = interval(z)
            assert torch.equal(z, states[i]), i
        assert stack.nfe == nfe > 0 and stack.shared.walk is None
        assert torch.equal(stack(x), states[-1]) and stack.nfe == nfe


@pytest.mark.parametrize('method', ADAMS_METHODS + ('dopri5',))
def test_an_interval_given_another_state_starts_a_new_solve_there(method):
    stack, x = _stack(method), _x()
    with torch.no_grad():
        full = stack.trajectory(x, [0, 1, 2, 3])
        z = stack[1](stack[0](x) * 1.5)  # as a hook that returns a new state
        restart = torchdiffeq.odeint(stack.field, full[0] * 1.5, stack.solver.grid(dtype=torch.float64)[1:],
                                     method=method, rtol=1e-3, atol=1e-4)
        torch.testing.assert_close(z, restart[1], rtol=1e-12, atol=1e-12)
        assert stack.shared.walk is not None  # the rest of that solve, until the walk ends
        stack[3](stack[2](z))
        assert stack.shared.walk is None


class RampField(torch.nn.Module):
    """dx/dt = t·a: X(t) = X(0) + a·t²/2, integrated exactly by RK4."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Parameter(torch.ones(16, dtype=torch.float64))

    def forward(self, t, x):
        return t * self.a.expand_as(x)


def test_an_interval_from_another_state_integrates_its_own_time_span():
    # interval i from any x is the solver on [t_i, t_{i+1}]: the field sees the true t, not a restart at 0
    stack = ContinuousDepthStack(RampField(), SolverConfig(method='rk4', steps=4, t_end=2.))
    y = _x() + 0.1
    with torch.no_grad():
        torch.testing.assert_close(stack[2](y), y + (1.5 ** 2 - 1.0 ** 2) / 2, rtol=1e-12, atol=1e-12)
    assert stack.nfe == 4


def test_hooks_see_every_interval_and_changed_states_are_integrated_on():
    stack, x = _stack('euler', steps=3), _x()
    seen = []
    stack[1].register_forward_hook(lambda m, i, out: out * 2)  # a hook that changes X(t_2)
    stack[2].register_forward_hook(lambda m, i, out: seen.append(out))
    with torch.no_grad():
        out = stack(x)  # hooks present: interval by interval
        z = x
        for k in range(3):
            z = z + stack.solver.h * stack.field(torch.tensor(k * stack.solver.h), z)
            z = 2 * z if k == 1 else z
        torch.testing.assert_close(out, z, rtol=1e-12, atol=1e-12)
        assert seen and seen[0] is out and stack.nfe == 3  # each interval one Euler step


def test_field_is_registered_once_under_interval_0():
    stack = _stack(steps=5)
    keys = list(stack.state_dict())
    assert keys and all(k.startswith('0.field.') for k in keys)
    assert len(keys) == len(set(keys)) == len(list(stack.field.state_dict()))
    assert [type(m) for m in stack] == [DepthInterval] * 5 and stack[3].stack is stack
    assert all(not list(m.parameters()) for m in list(stack)[1:])
    stack.set_solver(steps=2)
    assert len(stack) == 2 and stack[0].field is stack.field and len(list(stack.children())) == 2
    twin = copy.deepcopy(stack)
    assert twin[1].stack is twin and twin.field is not stack.field


def test_slices_are_shorter_horizons_sharing_the_field():
    stack, x = _stack('rk4', steps=6), _x()
    short = stack[:2]
    assert isinstance(short, ContinuousDepthStack) and short.field is stack.field and len(short) == 2
    assert short.solver.h == stack.solver.h and short.solver.t_end == pytest.approx(2 * stack.solver.h)
    with torch.no_grad():
        torch.testing.assert_close(short(x), stack.trajectory(x, [1])[0], rtol=1e-12, atol=1e-12)
    assert stack.nfe == 8  # slices share the counter (timm runs them with stop_early)
    for bad in (slice(1, 3), slice(0, 0), slice(0, 4, 2)):
        with pytest.raises(IndexError, match='first n intervals'):
            stack[bad]


def test_attention_masks_are_refused():
    stack, x = _stack(), _x()
    for call in (lambda: stack(x, attn_mask=torch.ones(5, 5)), lambda: stack[0](x, is_causal=True)):
        with pytest.raises(ValueError, match='attention masks'):
            call()


def test_the_recurrence_is_euler_with_h_1_on_the_state_subtracted_field():
    torch.manual_seed(0)
    block = Block(16, 2).eval().double()
    stack = ContinuousDepthStack(BlockField(block), SolverConfig('recurrence', steps=5))
    x = torch.randn(1, 4, 16, dtype=torch.float64)
    z = x
    with torch.no_grad():
        for i in range(5):
            z = block(z)
            torch.testing.assert_close(stack[i](stack.trajectory(x, [i - 1])[0] if i else x), z, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(stack(x), z, rtol=1e-12, atol=1e-12)
        assert stack.nfe == 5
        ode = ContinuousDepthStack(BlockField(block), SolverConfig('euler', steps=5, t_end=5.))
        assert torch.equal(ode(x), stack(x))  # the same stepper, the same arithmetic
    stack.set_solver(t_end=7.)
    assert len(stack) == 7 and stack.solver.grid()[1:].tolist() == list(range(1, 8))
    stack.set_solver(steps=6)
    assert len(stack) == 6 and stack.solver.t_end == 6.


def test_a_grid_change_keeps_the_intervals_and_their_hooks():
    stack, x = _stack(steps=4), _x()
    seen = []
    first, second = stack[0], stack[1]
    stack[1].register_forward_hook(lambda m, i, out: seen.append(m.index))
    stack.set_solver(steps=6)
    assert stack[0] is first and stack[1] is second and len(list(stack.children())) == 6
    stack.set_solver(steps=3)
    removed = stack[2]
    stack.set_solver(steps=2)
    with torch.no_grad():
        stack(x)
    assert seen == [1]
    with pytest.raises(ValueError, match='intervals 1 carry hooks and a grid of 1 intervals would remove them: '
                                         'remove their hooks first, or keep at least 2 intervals'):
        stack.set_solver(steps=1)
    with pytest.raises(RuntimeError, match='interval 2 was removed by a grid change to 2 intervals'):
        removed(x)


def test_a_solver_must_be_a_solver_config():
    with pytest.raises(TypeError, match='solver must be a SolverConfig, got dict'):
        ContinuousDepthStack(ODEViTField(16, 2), dict(method='euler'))


@pytest.mark.parametrize('recurrent', [False, True])
def test_grad_checkpointing_recomputes_field_evaluations_with_the_same_gradients(recurrent):
    torch.manual_seed(0)
    field = BlockField(Block(16, 2)).double()
    stack = ContinuousDepthStack(field, SolverConfig('recurrence' if recurrent else 'explicit_adams', steps=3))
    x = torch.randn(2, 4, 16, dtype=torch.float64)
    grads = []
    for enable in (False, True):
        stack.grad_checkpointing = enable
        field.zero_grad()
        z = x
        for interval in stack:  # the interval path too
            z = interval(z)
        (stack(x).sum() + z.pow(2).sum()).backward()
        grads.append([p.grad.clone() for p in field.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize('method', ['euler', 'explicit_adams'])
def test_nothing_is_kept_between_calls(method):
    stack, x = _stack(method), _x().requires_grad_()
    stack(x)
    tensors = [k for k, v in vars(stack).items() if isinstance(v, torch.Tensor) or
               (isinstance(v, (list, tuple)) and any(isinstance(e, torch.Tensor) for e in v))]
    assert tensors == []
    twin = copy.deepcopy(stack)
    assert twin[1].stack is twin


@pytest.mark.parametrize('mode', ['eval', 'train'])
def test_intervals_added_by_a_new_solver_take_the_stacks_mode(mode):
    """model.eval() then set_solver(steps=more): every interval is in eval mode, as after timm's own .eval()."""
    stack = getattr(_stack(steps=2), mode)()
    for steps in (6, 3, 8):  # a new grid (new interval modules), then growth past the old count
        stack.set_solver(steps=steps)
        assert {m.training for m in stack.modules()} == {mode == 'train'}, steps
    stack.solver = stack.solver  # the same config: intervals kept
    assert {m.training for m in stack.modules()} == {mode == 'train'}


@pytest.mark.parametrize('edit,words', [
    (lambda s: s.add_module('4', torch.nn.Identity()), 'add_module'),
    (lambda s: s.register_module('extra', torch.nn.Identity()), 'add_module'),
    (lambda s: setattr(s, 'extra', torch.nn.Identity()), 'module attribute'),
    (lambda s: setattr(s, '0', torch.nn.Identity()), 'module attribute'),
])
def test_sequential_edits_are_refused_with_the_way_to_change_depth(edit, words):
    """nn.Sequential's edits would be silently ignored by the integration (or drop the field): refused, naming
    set_solver / set_iterations / truncate."""
    stack, x = _stack(), _x()
    expected = stack(x)
    with pytest.raises(TypeError, match=f'{words}.*set_solver'):
        edit(stack)
    assert len(stack) == 4 and len(stack._modules) == 4
    torch.testing.assert_close(stack(x), expected)


@pytest.mark.parametrize('edit', [
    lambda s: s.append(torch.nn.Identity()),
    lambda s: s.insert(0, torch.nn.Identity()),
    lambda s: s.__setitem__(0, torch.nn.Identity()),
    lambda s: s.__delitem__(0),
])
def test_a_stack_has_no_list_edits(edit):
    """A stack is no nn.Sequential: its list edits do not exist (Python's own errors)."""
    with pytest.raises((AttributeError, TypeError)):
        edit(_stack())


def test_module_converters_that_re_add_each_child_still_work():
    """torch's convert_sync_batchnorm (train.py --sync-bn) re-adds every child as itself."""
    stack, x = _stack(), _x()
    expected = stack(x)
    assert torch.nn.SyncBatchNorm.convert_sync_batchnorm(stack) is stack
    torch.testing.assert_close(stack(x), expected)
    with pytest.raises(IndexError, match='-5 out of range for 4 intervals'):
        stack[-5]


def test_a_slice_a_field_type_and_drawn_states_refuse_what_they_would_get_wrong():
    """A slice's solver cannot change (its intervals run the model's grid), a misspelt field type is no naive field,
    and drawn_states needs a drawn depth: each a clear error, not a silent wrong answer."""
    import timm
    import timm_odevit  # noqa: F401
    model = timm.create_model('odevit_tiny_cifar', embed_dim=32, num_heads=2, steps=4)
    with pytest.raises(ValueError, match='is a slice'):
        model.blocks[:3].set_solver(method='rk4')
    with pytest.raises(ValueError, match="Unknown field 'state-subtracted'"):
        BlockField(Block(32, 2), 'state-subtracted')
    with pytest.raises(ValueError, match='drawn_states integrates a drawn depth'):
        model.blocks.drawn_states(torch.zeros(1, 5, 32))
