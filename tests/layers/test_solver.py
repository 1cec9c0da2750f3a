import math

import pytest
import torch
from torch import nn

import torchdiffeq

from timm_odevit.layers import ContinuousDepthStack, ODEViTField, SolverConfig
from timm_odevit.layers.solver import (
    ADAMS_METHODS, ADAPTIVE_METHODS, MAX_STEPS, METHODS, OPTIONS, RUNGE_KUTTA_METHODS, TABLEAUS)
from timm_odevit.layers.stepping import rk_step


def _field(dim=16, heads=2, **kw):
    torch.manual_seed(0)
    return ODEViTField(dim, heads, mlp_ratio=2., **kw).eval()


class LinearField(nn.Module):
    """dx/dt = A x (exact solution expm(tA) x0)."""

    def __init__(self, A):
        super().__init__()
        self.A = nn.Parameter(A)

    def forward(self, t, x):
        return x @ self.A.T


# ---- configuration --------------------------------------------------------------------------------
def test_unknown_solver_is_a_clear_error():
    with pytest.raises(ValueError, match="Unknown ODE solver 'rk5'.*euler"):
        SolverConfig(method='rk5')


@pytest.mark.parametrize('steps', [0, -3])
def test_bad_steps(steps):
    with pytest.raises(ValueError, match='steps must be an integer >= 1'):
        SolverConfig(steps=steps)


@pytest.mark.parametrize('steps', [2.5, 4., True, '12'])
def test_steps_of_the_wrong_type(steps):
    with pytest.raises(TypeError, match='steps must be an integer'):
        SolverConfig(steps=steps)


@pytest.mark.parametrize('name', ['adjoint', 'check_finite'])
@pytest.mark.parametrize('value', ['no', 'false', 'False', 0, 1, None])
def test_switches_must_be_real_booleans(name, value):
    # adjoint='no' used to turn the adjoint ON (a non-empty string is truthy)
    with pytest.raises(TypeError, match=f'{name} must be True or False'):
        SolverConfig(**{name: value})
    with pytest.raises(TypeError, match=f'{name} must be True or False'):
        ContinuousDepthStack(_field()).set_solver(**{name: value})


@pytest.mark.parametrize('name', ['rtol', 'atol', 't_end', 'step_size'])
@pytest.mark.parametrize('value', [0, -1e-3, math.inf, math.nan])
def test_tolerances_and_lengths_must_be_finite_and_positive(name, value):
    with pytest.raises(ValueError, match=f'{name} must be a finite number > 0'):
        SolverConfig(**{name: value})


@pytest.mark.parametrize('name', ['rtol', 'atol', 't_end', 'step_size'])
@pytest.mark.parametrize('value', [True, '1e-3', None])
def test_tolerances_and_lengths_must_be_numbers(name, value):
    if name == 'step_size' and value is None:
        return  # step_size=None means "use steps"
    with pytest.raises(TypeError, match=f'{name} must be a number'):
        SolverConfig(**{name: value})


def test_unknown_torchdiffeq_option_is_an_error_listing_the_valid_ones():
    with pytest.raises(ValueError, match=r"\['max_num_step'\] are not options of 'dopri5': its options .*max_num_steps"):
        SolverConfig(method='dopri5', options={'max_num_step': 10})
    with pytest.raises(ValueError, match=r"not options of 'euler': its options are none"):
        SolverConfig(method='euler', options={'max_num_steps': 10})  # an adaptive-only option
    with pytest.raises(ValueError, match='not options of'):
        ContinuousDepthStack(_field()).set_solver(method='rk4', options={'first_step': 0.1})
    assert SolverConfig(method='dopri5', options={'max_num_steps': 10}).options == {'max_num_steps': 10}
    assert 'max_order' in OPTIONS['implicit_adams'] and 'dtype' in OPTIONS['bosh3']
    with pytest.raises(ValueError, match='rtol and atol are SolverConfig fields'):
        SolverConfig(method='dopri5', options={'rtol': 1e-5})
    with pytest.raises(TypeError, match='options must be a dict'):
        SolverConfig(options=[('max_order', 2)])


def test_steps_and_step_size_together_must_agree():
    with pytest.raises(ValueError, match=r'steps=12 and step_size=0.25 disagree \(step_size gives 4 steps.*only one'):
        SolverConfig(steps=12, step_size=0.25)
    assert SolverConfig(steps=4, step_size=0.25).steps == 4  # the same grid: nothing to choose between
    with pytest.raises(ValueError, match='disagree'):
        ContinuousDepthStack(_field()).set_solver(steps=12, step_size=0.25)


def test_grids_above_the_step_cap_are_refused():
    words = r'1000000000 grid steps.*exceed max_steps=10000: use fewer steps, an adaptive method.*raise max_steps'
    with pytest.raises(ValueError, match=words):
        SolverConfig(step_size=1e-9)
    with pytest.raises(ValueError, match='exceed max_steps'):
        SolverConfig(steps=MAX_STEPS + 1)
    with pytest.raises(ValueError, match='exceed max_steps'):
        ContinuousDepthStack(_field()).set_solver(t_end=1e6)  # same step length over a far longer horizon
    assert SolverConfig(steps=MAX_STEPS).steps == MAX_STEPS
    assert SolverConfig(steps=20_000, max_steps=20_000).steps == 20_000


def test_unknown_setting_in_set_solver():
    with pytest.raises(TypeError, match=r"unknown solver setting\(s\) \['stpes'\]; valid: method, steps"):
        ContinuousDepthStack(_field()).set_solver(stpes=4)


def test_model_kwargs_are_validated_too():
    import timm
    with pytest.raises(TypeError, match='adjoint must be True or False'):
        timm.create_model('odevit_tiny_cifar', adjoint='no', device='meta')
    with pytest.raises(ValueError, match='rtol must be a finite number > 0'):
        timm.create_model('odevit_tiny_cifar', solver='dopri5', rtol=math.inf, device='meta')


def test_replace_keeps_valid_behaviour():
    cfg = SolverConfig(step_size=0.25)
    assert cfg.replace(t_end=2.).steps == 8  # step_size kept over the new horizon
    assert cfg.replace(step_size=0.5).steps == 2
    assert cfg.replace(step_size=None).steps == 4 and cfg.replace(step_size=None).step_size is None
    cfg = SolverConfig(steps=6, t_end=3.)
    assert cfg.replace(t_end=6.).steps == 12  # h kept
    assert cfg.replace(method='rk4').steps == 6 and cfg.replace(method='rk4').h == 0.5
    assert SolverConfig().steps == 12 and isinstance(SolverConfig(t_end=2).t_end, float)


def test_bad_tolerances_and_horizon():
    with pytest.raises(ValueError, match='rtol'):
        SolverConfig(rtol=0)
    with pytest.raises(ValueError, match='t_end'):
        SolverConfig(t_end=-1.)
    with pytest.raises(ValueError, match='step_size'):
        SolverConfig(step_size=0.)
    with pytest.raises(ValueError, match='SolverConfig fields'):
        SolverConfig(options={'step_size': 0.1})


def test_the_recurrence_is_euler_with_h_1():
    """'recurrence': Euler's table with one step per unit of time, so its horizon follows its steps."""
    assert TABLEAUS['recurrence'] == TABLEAUS['euler'] and RUNGE_KUTTA_METHODS['recurrence'] == 1
    cfg = SolverConfig('recurrence', steps=5)
    assert cfg.h == 1. and cfg.t_end == 5. and cfg.unit == 'iteration' and SolverConfig().unit == 't'
    assert cfg.replace(steps=8).t_end == 8. and cfg.replace(t_end=3.).steps == 3
    assert cfg.replace(method='euler') == SolverConfig('euler', steps=5, t_end=5.)  # the same grid, as an ODE
    with pytest.raises(ValueError, match='the recurrence steps by h = 1, got step_size=0.5: set its iterations'):
        cfg.replace(step_size=0.5)


def test_step_size_sets_the_number_of_steps():
    assert SolverConfig(step_size=0.25).steps == 4
    assert SolverConfig(step_size=0.3).steps == 4  # ceil: the actual step (0.25) is <= step_size
    assert SolverConfig(step_size=1 / 12).steps == 12  # no extra step from float round-off
    for n in (49, 93, 98):  # 1 / (1 / n) is n + 7e-15 for 49 and 98: ceil alone takes one step too many
        assert SolverConfig(step_size=1 / n).steps == n
        assert SolverConfig(step_size=2 / n, t_end=2.).steps == n
    cfg = SolverConfig(step_size=0.25).replace(steps=10)
    assert cfg.steps == 10 and cfg.step_size is None


# ---- math -------------------------------------------------------------------------------------------
class TimedField(nn.Module):
    """A nonlinear, non-autonomous field: dx/dt = tanh(x A) + cos(t)."""

    def __init__(self, dim=4):
        super().__init__()
        self.A = nn.Parameter(torch.randn(dim, dim, dtype=torch.float64, generator=torch.Generator().manual_seed(0)))

    def forward(self, t, x):
        return torch.tanh(x @ self.A) + torch.cos(t)


@pytest.mark.parametrize('method', ['euler', 'midpoint', 'heun2', 'heun3', 'rk4'])
def test_butcher_tables_are_torchdiffeqs_methods(method):
    """Our stepping = torchdiffeq.odeint with the method of the same name (rk4: the 3/8 rule) on the same grid."""
    field, x0 = TimedField(), torch.randn(3, 4, dtype=torch.float64)
    stack = ContinuousDepthStack(field, SolverConfig(method, steps=5, t_end=2.))
    with torch.no_grad():
        ours = stack.trajectory(x0, list(range(5)))
        theirs = torchdiffeq.odeint(field, x0, stack.solver.grid(dtype=torch.float64), method=method)[1:]
        torch.testing.assert_close(ours, theirs, rtol=1e-13, atol=1e-13)
        one = rk_step(lambda t, x: field(torch.tensor(t, dtype=torch.float64), x), 0.4, 0.4, x0, method)  # t = 0.4
        torch.testing.assert_close(one, torchdiffeq.odeint(field, x0, torch.tensor([.4, .8], dtype=torch.float64),
                                                           method=method)[1], rtol=1e-13, atol=1e-13)


def test_euler_equals_hand_written_updates():
    field = _field().double()
    x0 = torch.randn(2, 5, 16, dtype=torch.float64)
    N = 7
    out = ContinuousDepthStack(field, SolverConfig(method='euler', steps=N))(x0)
    x, h = x0, 1 / N
    for k in range(N):
        x = x + h * field(torch.tensor(k * h), x)
    torch.testing.assert_close(out, x, rtol=1e-12, atol=1e-12)


def test_trajectory_states_are_the_euler_iterates():
    field = _field().double()
    x0 = torch.randn(1, 4, 16, dtype=torch.float64)
    states = ContinuousDepthStack(field, SolverConfig(steps=5)).trajectory(x0, [0, 2, 4])
    x, expected = x0, []
    for k in range(5):
        x = x + 0.2 * field(None, x)
        expected.append(x)
    torch.testing.assert_close(states, torch.stack([expected[0], expected[2], expected[4]]), rtol=1e-12, atol=1e-12)


class CountingField(nn.Module):
    """Wraps a field and counts the calls the solver really makes."""

    def __init__(self, field):
        super().__init__()
        self.field, self.calls = field, 0

    def forward(self, t, x):
        self.calls += 1
        return self.field(t, x)


@pytest.mark.parametrize('method', METHODS)
def test_nfe_is_the_number_of_real_field_calls(method):
    counter = CountingField(_field())
    block = ContinuousDepthStack(counter, SolverConfig(method=method, steps=6))
    x = torch.randn(1, 3, 16)
    for steps, grad in ((6, False), (12, False), (12, True)):
        block.set_solver(steps=steps)
        counter.calls = 0
        with torch.set_grad_enabled(grad):
            block(x)
        assert block.nfe == counter.calls and isinstance(block.nfe, int), (steps, grad)
    counter.calls = 0
    with torch.no_grad():
        block.trajectory(x, [2])  # stops at t_3
    assert block.nfe == counter.calls


def test_only_runge_kutta_methods_have_a_fixed_count_per_step():
    counter = CountingField(_field())
    x = torch.randn(1, 3, 16)
    for method in ADAMS_METHODS:
        block = ContinuousDepthStack(counter, SolverConfig(method=method, steps=12))
        assert block.solver.evals_per_step is None and block.solver.exact_evals(12) is None
        counter.calls = 0
        with torch.no_grad():
            block(x)
        assert counter.calls > 12  # RK4 start-up steps (4 evaluations each), then Adams steps
    for method, stages in RUNGE_KUTTA_METHODS.items():
        assert SolverConfig(method=method).evals_per_step == stages


@pytest.mark.parametrize('method', ADAPTIVE_METHODS)
def test_adaptive_solver_respects_tolerance(method):
    torch.manual_seed(0)
    A = torch.randn(4, 4, dtype=torch.float64) * 0.8
    field = LinearField(A)
    x0 = torch.randn(3, 4, dtype=torch.float64)
    exact = x0 @ torch.linalg.matrix_exp(A).T
    errors, nfes = [], []
    for tol in (1e-3, 1e-8):
        block = ContinuousDepthStack(field, SolverConfig(method=method, rtol=tol, atol=tol, steps=1))
        with torch.no_grad():
            out = block(x0)
        errors.append((out - exact).abs().max().item())
        nfes.append(block.nfe)
    scale = 1 + exact.abs().max().item()
    assert errors[0] < 100 * 1e-3 * scale
    assert errors[1] < 100 * 1e-8 * scale
    assert errors[1] < errors[0] and nfes[1] > nfes[0]  # tighter tolerance: more work, less error


def test_fixed_grid_converges_at_its_order():
    A = torch.tensor([[0., 1.], [-1., 0.]], dtype=torch.float64)
    field = LinearField(A)
    x0 = torch.tensor([[1., 0.]], dtype=torch.float64)
    exact = x0 @ torch.linalg.matrix_exp(A).T
    for method, order in (('euler', 1), ('midpoint', 2), ('rk4', 4)):
        with torch.no_grad():
            e1 = (ContinuousDepthStack(field, SolverConfig(method=method, steps=16))(x0) - exact).norm().item()
            e2 = (ContinuousDepthStack(field, SolverConfig(method=method, steps=32))(x0) - exact).norm().item()
        assert abs(math.log2(e1 / e2) - order) < 0.3, method


def test_adjoint_and_direct_backprop_agree():
    field = _field(dim=8, heads=2, depth_scale=2.).double()
    x0 = torch.randn(2, 3, 8, dtype=torch.float64, requires_grad=True)
    grads = []
    for adjoint in (False, True):
        block = ContinuousDepthStack(field, SolverConfig(method='dopri5', rtol=1e-9, atol=1e-9, adjoint=adjoint))
        field.zero_grad()
        x0.grad = None
        block(x0).pow(2).sum().backward()
        grads.append([x0.grad.clone()] + [p.grad.clone() for p in field.parameters()])
    for g_direct, g_adjoint in zip(*grads):
        torch.testing.assert_close(g_adjoint, g_direct, rtol=1e-4, atol=1e-6)


def test_adjoint_on_a_fixed_grid_runs_backwards_on_the_same_step():
    field = _field(dim=8, heads=2, depth_scale=2.).double()
    x0 = torch.randn(1, 3, 8, dtype=torch.float64, requires_grad=True)
    grads = []
    for adjoint in (False, True):
        x0.grad = None
        block = ContinuousDepthStack(field, SolverConfig(method='rk4', steps=32, adjoint=adjoint))
        block(x0).sum().backward()
        grads.append(x0.grad.clone())
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize('method', ['euler', 'rk4'])
def test_the_adjoint_keeps_memory_constant_in_the_steps_and_hooks_still_fire(method):
    """A fixed-grid adjoint forward keeps only X(0) and X(t_end) for backward (memory O(1) in the steps, what the
    adjoint is chosen for), on the same grid as the interval walk; an interval with a hook is walked, and fires."""
    field = _field(dim=8, heads=2, depth_scale=2.)
    x0 = torch.randn(2, 3, 8, requires_grad=True)

    def saved(stack):
        numels = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: numels.append(t.numel()) or t, lambda t: t):
            out = stack(x0)
        return sum(numels), out

    (few, _), (many, out) = (saved(ContinuousDepthStack(field, SolverConfig(method=method, steps=n, adjoint=True)))
                             for n in (4, 32))
    assert few == many
    stack = ContinuousDepthStack(field, SolverConfig(method=method, steps=32, adjoint=True))
    assert stack.nfe == 0 and stack(x0) is not None and stack.nfe == 32 * {'euler': 1, 'rk4': 4}[method]
    fired = []
    stack[5].register_forward_hook(lambda *args: fired.append(1))
    walked, walked_out = saved(stack)
    assert fired == [1] and walked > many
    torch.testing.assert_close(walked_out, out)


def test_global_module_hooks_fire_on_the_intervals_under_the_adjoint_too():
    """``register_module_forward_hook`` fires on every module call: a stack solved with the adjoint walks its
    intervals while such a hook is registered, so the hook sees each one, as without the adjoint."""
    field = _field(dim=8, heads=2, depth_scale=2.)
    x0 = torch.randn(2, 3, 8, requires_grad=True)
    for adjoint in (False, True):
        stack = ContinuousDepthStack(field, SolverConfig(method='euler', steps=4, adjoint=adjoint))
        seen = []
        handle = torch.nn.modules.module.register_module_forward_hook(
            lambda m, args, out: seen.append(m.index) if m in list(stack) else None)
        try:
            stack(x0)
        finally:
            handle.remove()
        assert seen == [0, 1, 2, 3], adjoint


# ---- failures -----------------------------------------------------------------------------------
class ExplodingField(nn.Module):
    def forward(self, t, x):
        return x * 1e30


@pytest.mark.parametrize('method', ['euler', 'rk4'])
def test_blow_up_raises_with_solver_settings(method):
    block = ContinuousDepthStack(ExplodingField(), SolverConfig(method=method, steps=12))
    with pytest.raises(FloatingPointError, match=f"non-finite.*method='{method}'.*steps=12"):
        block(torch.ones(1, 2, 4))


def test_blow_up_in_adaptive_solver_raises():
    block = ContinuousDepthStack(ExplodingField(), SolverConfig(method='dopri5'))
    with pytest.raises(FloatingPointError, match="method='dopri5'"):
        block(torch.ones(1, 2, 4))


def test_check_finite_opt_out_returns_the_state():
    block = ContinuousDepthStack(ExplodingField(), SolverConfig(steps=12, check_finite=False))
    assert not torch.isfinite(block(torch.ones(1, 2, 4))).all()


def test_bad_indices():
    stack = ContinuousDepthStack(_field(), SolverConfig(steps=4))
    for indices in ([4], [3, 2], [], [-1]):
        with pytest.raises(ValueError, match=r'indices must increase within 0\.\.3'):
            stack.trajectory(torch.randn(1, 2, 16), indices)


@pytest.mark.parametrize('config', [SolverConfig(steps=4), SolverConfig(method='dopri5', steps=4),
                                    SolverConfig(method='dopri5', steps=4, adjoint=True),
                                    SolverConfig(method='implicit_adams', steps=4)], ids=lambda c: c.describe())
def test_an_empty_batch_integrates_to_an_empty_batch(config):
    """timm's ViT takes a batch of 0 images; so must every solver (an adaptive one's step-size control divided
    by the zero-size error norm and reported 'underflow in dt')."""
    out = ContinuousDepthStack(_field(), config).trajectory(torch.randn(0, 3, 16), [1, 3])
    assert out.shape == (2, 0, 3, 16)


def test_meta_tensors_keep_shape():
    x0 = torch.empty(2, 5, 16, device='meta')
    field = ODEViTField(16, 2, device='meta')
    for config in (SolverConfig(steps=4), SolverConfig('dopri5', steps=4)):
        out = ContinuousDepthStack(field, config).trajectory(x0, [1, 3])
        assert out.shape == (2, 2, 5, 16) and out.is_meta


def test_fixed_grid_forward_stops_recompiling():
    # the NFE bookkeeping must not change Python state dynamo guards on (a counter bumped inside the field
    # recompiled for every evaluation until the recompile limit)
    import torch._dynamo
    torch._dynamo.reset()
    block = ContinuousDepthStack(_field(), SolverConfig(method='euler', steps=12))
    compiled = torch.compile(block, backend='eager')
    x = torch.randn(1, 3, 16)
    expected = block(x)
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        compiled(x)  # warm-up
        with torch._dynamo.config.patch(error_on_recompile=True):
            for _ in range(3):
                torch.testing.assert_close(compiled(x), expected)
    assert block.nfe == 12
    torch._dynamo.reset()


def test_half_precision_state_with_tolerances_below_its_precision_is_refused_up_front():
    # the step-size controller cannot meet atol 1e-4 in float16 (eps ~1e-3): say so, not "overflow"
    from timm_odevit.layers import ContinuousDepthStack, ODEViTField
    torch.manual_seed(0)
    stack = ContinuousDepthStack(ODEViTField(16, 2).half(), SolverConfig('dopri5', steps=2))
    x = torch.randn(2, 5, 16).half()
    with pytest.raises(ValueError, match=r'cannot meet rtol=0.001, atol=0.0001 in torch.float16 \(its precision'):
        stack(x)
    stack.set_solver(rtol=1e-2, atol=1e-2)  # above float16's precision, the controller still collapses here
    with pytest.raises(FloatingPointError, match='step-size control failed in half precision') as info:
        stack(x)
    assert 'overflow in' not in str(info.value) and 'values above 65504' not in str(info.value)
    stack.float()
    assert torch.isfinite(stack(x.float())).all()


def test_a_spelled_out_solver_wins_over_flat_kwargs_and_a_method_name_takes_them():
    """A saved config.json records flat kwargs (steps=6); a caller's dict or SolverConfig solver is taken as given,
    a method name keeps the saved steps, as it did when the caller's flat kwargs replaced the saved ones."""
    from timm_odevit.layers.solver import fold_flat_solver_kwargs
    saved = dict(solver='euler', steps=6, t_end=1.0)
    assert fold_flat_solver_kwargs({**saved, 'solver': {'method': 'rk4', 'steps': 4}})['solver'] == {
        'method': 'rk4',
        'steps': 4,
        't_end': 1.0,
    }
    config = SolverConfig('rk4', steps=4)
    assert fold_flat_solver_kwargs({**saved, 'solver': config})['solver'] is config
    assert fold_flat_solver_kwargs({**saved, 'solver': 'rk4'})['solver'] == {'method': 'rk4', 'steps': 6, 't_end': 1.0}
    # a given step_size replaces the saved steps (the dict replaced the saved method name: euler, the default)
    assert fold_flat_solver_kwargs({**saved, 'solver': {'step_size': 0.5}})['solver'] == {'step_size': 0.5, 't_end': 1.0}
