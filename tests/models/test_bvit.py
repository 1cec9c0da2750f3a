import pytest
import numpy as np
import timm
import torch
from torch.utils.flop_counter import FlopCounterMode

import timm_odevit  # noqa: F401
from timm_odevit.evaluation import accuracy_vs_iterations
from timm_odevit.models import embed_tokens


@pytest.fixture(scope='module')
def recurrent():
    torch.manual_seed(0)
    return timm.create_model('bvit_tiny_cifar').eval()


def _as(regime_kwargs, source):
    model = timm.create_model('bvit_tiny_cifar', **regime_kwargs).eval().double()
    model.load_state_dict(source.state_dict())  # same parameter names in every regime
    return model


def test_size_and_logits(recurrent):
    block_params = sum(p.numel() for p in recurrent.field.block.parameters())
    D = recurrent.embed_dim
    assert block_params == 12 * D * D + 13 * D  # one timm Block: 12D² + 13D
    out = recurrent(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 10) and torch.isfinite(out).all() and recurrent.nfe == 12


def test_euler_h1_state_subtracted_is_the_recurrence(recurrent):
    ref = recurrent.double()
    assert ref.blocks.solver.method == 'recurrence' and ref.solver is None and ref.regime == 'recurrent'
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    expected = ref(x)
    ode = _as(dict(regime='ode', field='state_subtracted', solver='euler'), ref)
    assert ode.solver.h == 1.0 and ode.solver.steps == 12 and ode.regime == 'ode'
    assert torch.equal(ode(x), expected)  # one stepper: the same arithmetic
    naive = _as(dict(regime='ode', field='naive', solver='euler'), ref)
    assert (naive.forward_features(x) - ref.forward_features(x)).abs().max() > 1e-2
    recurrent.float()


def test_iterates_are_block_applications(recurrent):
    x = torch.randn(1, 3, 32, 32)
    states = recurrent.forward_intermediates(x, output_fmt='NLC', intermediates_only=True, return_prefix_tokens=True)
    z = embed_tokens(recurrent, x)
    for k in range(12):
        z = recurrent.field.block(z)
        spatial, prefix = states[k]
        torch.testing.assert_close(torch.cat([prefix, spatial], 1), z)


@pytest.mark.parametrize('solver,steps,evals', [('euler', 12, 12), ('midpoint', 6, 12), ('rk4', 3, 12)])
def test_matched_block_evaluations(solver, steps, evals):
    model = timm.create_model('bvit_tiny_cifar', regime='ode', solver=solver, steps=steps).eval()
    model(torch.randn(1, 3, 32, 32))
    assert model.nfe == evals and model.solver.t_end == 12


@pytest.mark.parametrize('kwargs,evals_per_unit', [({}, 1), ({'regime': 'ode'}, 1),
                                                   ({'regime': 'ode', 'solver': 'rk4'}, 4)])
def test_train_depth_draws_the_horizon_at_the_same_step_length(kwargs, evals_per_unit):
    """bViT's dial is the horizon T (iterations): a drawn T keeps the step length h = 1."""
    model = timm.create_model('bvit_tiny_cifar', train_depth=(4, 8), **kwargs)
    x = torch.randn(1, 3, 32, 32)
    torch.manual_seed(0)
    with torch.no_grad():
        seen = set()
        for _ in range(30):
            model.train()(x)
            seen.add(model.nfe)
        model.eval()(x)
    assert seen == {t * evals_per_unit for t in range(4, 9)} and model.nfe == 12 * evals_per_unit
    assert model.iterations == 12


def test_train_depth_on_a_grid_whose_step_does_not_divide_every_horizon_is_refused():
    with pytest.raises(ValueError, match='t_end=5 is not a whole number of steps of the current h=2'):
        timm.create_model('bvit_tiny_cifar', regime='ode', solver='rk4', steps=6, train_depth=(4, 8))


def test_train_depth_and_deep_supervision_are_one_or_the_other():
    with pytest.raises(ValueError, match='use one of the two'):
        timm.create_model('bvit_tiny_cifar', iterations=4, stages=(2, 4), train_depth=(2, 6))


@pytest.mark.parametrize('kwargs', [{}, {'regime': 'ode'}, {'regime': 'ode', 'solver': 'rk4', 'steps': 3}])
def test_runs_beyond_the_training_horizon(kwargs):
    model = timm.create_model('bvit_tiny_cifar', **kwargs).eval()
    x = torch.randn(2, 3, 32, 32)
    model.set_iterations(48)
    out = model(x)
    assert out.shape == (2, 10) and torch.isfinite(out).all()
    assert model.nfe == 48 and model.iterations == 48
    model.set_iterations(12)
    assert model.iterations == 12


def test_accuracy_vs_iterations_restores_the_horizon(recurrent):
    data = [(torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,)))] * 2
    curve = accuracy_vs_iterations(recurrent, data, iterations=48)
    assert [r['point'] for r in curve] == list(range(1, 49))
    assert all(0 <= r['top1'] <= 100 for r in curve)
    logits = recurrent(data[0][0])
    assert curve[11]['top1'] == 100. * (logits.argmax(-1) == data[0][1]).float().mean().item()
    assert [r['time'] for r in curve] == [float(k) for k in range(1, 49)]  # the recurrence steps by h = 1
    assert recurrent.iterations == 12
    with pytest.raises(AttributeError, match="no attribute 'forward_stages'"):
        accuracy_vs_iterations(timm.create_model('odevit_tiny_cifar'), data, 4)


def test_accuracy_vs_iterations_times_an_ode_grid_by_its_step():
    """ODE regime, rk4 3 steps over t_end = 12: each point is h = 4 apart, also past the training horizon."""
    torch.manual_seed(0)
    model = timm.create_model('bvit_tiny_cifar', regime='ode', solver='rk4', steps=3, embed_dim=32, num_heads=2).eval()
    data = [(torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,)))]
    curve = accuracy_vs_iterations(model, data, iterations=24)
    assert [r['point'] for r in curve] == list(range(1, 7))
    assert [r['time'] for r in curve] == [4., 8., 12., 16., 20., 24.]
    assert model.iterations == 12 and model.solver.steps == 3


def test_stage_outputs_and_heads():
    model = timm.create_model('bvit_tiny_cifar', stages=(4, 8, 12), stage_heads='separate',
                              stage_weights=(1, 1, 2)).eval()
    assert model.stage_weights == (0.25, 0.25, 0.5)
    x = torch.randn(2, 3, 32, 32)
    stage_logits = model.forward_stages(x)
    assert len(stage_logits) == 3 and all(s.shape == (2, 10) for s in stage_logits)
    torch.testing.assert_close(stage_logits[-1], model(x))
    assert len(model.stage_heads) == 2
    model.stage_outputs = True
    assert torch.is_tensor(model(x))  # eval forward stays the final logits
    model.train()
    assert len(model(x)) == 3
    model.reset_classifier(5)
    assert all(s.shape == (2, 5) for s in model.forward_stages(x))


def test_bad_arguments():
    with pytest.raises(ValueError, match='regime'):
        timm.create_model('bvit_tiny_cifar', regime='loop')
    with pytest.raises(ValueError, match='field'):
        timm.create_model('bvit_tiny_cifar', regime='ode', field='other')
    with pytest.raises(ValueError, match='iterations'):
        timm.create_model('bvit_tiny_cifar', iterations=0)
    with pytest.raises(ValueError, match='iterations'):
        timm.create_model('bvit_tiny_cifar', regime='ode', iterations=-2)
    with pytest.raises(ValueError, match='outside the horizon'):
        timm.create_model('bvit_tiny_cifar', stages=(0, 12))
    beyond = timm.create_model('bvit_tiny_cifar', stages=(6, 13))  # as saved after set_iterations: deep
    with pytest.raises(ValueError, match='outside the horizon'):  # supervision refuses, evaluation runs
        beyond.forward_stages(torch.randn(1, 3, 32, 32))
    with pytest.raises(ValueError, match='increasing'):
        timm.create_model('bvit_tiny_cifar', stages=(12, 6))
    with pytest.raises(ValueError, match='stage_weights'):
        timm.create_model('bvit_tiny_cifar', stages=(6, 12), stage_weights=(1.,))
    with pytest.raises(ValueError, match="regime='ode'"):
        timm.create_model('bvit_tiny_cifar', solver='rk4')
    with pytest.raises(ValueError, match='Unknown ODE solver'):
        timm.create_model('bvit_tiny_cifar', regime='ode', solver='rk45')
    model = timm.create_model('bvit_tiny_cifar')
    for bad in (0, True, 2.0, '3'):
        with pytest.raises(ValueError, match='iterations must be an integer >= 1'):
            model.set_iterations(bad)
    with pytest.raises(ValueError, match='the recurrence steps by h = 1, got step_size=0.5: set its iterations'):
        model.set_solver(step_size=0.5)
    with pytest.raises(RuntimeError, match='to have 3 channels'):  # torch's conv
        model(torch.randn(1, 4, 32, 32))
    with pytest.raises(TypeError):
        timm.create_model('bvit_tiny_cifar', unknown_kwarg=3)


@pytest.mark.parametrize('kwargs', [{}, {'regime': 'ode'}])
def test_nan_weights_raise_naming_them(kwargs):
    model = timm.create_model('bvit_tiny_cifar', **kwargs).eval()
    with torch.no_grad():
        model.field.block.mlp.fc2.bias.fill_(float('nan'))
    with pytest.raises(FloatingPointError, match=r"field's weights hold NaN/Inf \(block.mlp.fc2.bias\)"):
        model(torch.randn(1, 3, 32, 32))


def _flops(model, size):
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(torch.randn(1, 3, size, size))
    return counter.get_total_flops()


@pytest.mark.parametrize('size', ['tiny', 'small'])
def test_matched_baselines(size):
    bvit = timm.create_model(f'bvit_{size}_cifar').eval()
    flops_vit = timm.create_model(f'vit_{size}_cifar_flops_matched').eval()
    params_vit = timm.create_model(f'vit_{size}_cifar_params_matched').eval()
    assert abs(_flops(flops_vit, 32) / _flops(bvit, 32) - 1) < 0.01
    bvit_blocks = sum(p.numel() for p in bvit.field.block.parameters())
    vit_blocks = sum(p.numel() for p in params_vit.blocks.parameters())
    assert abs(vit_blocks / bvit_blocks - 1) < 0.02
    assert len(flops_vit.blocks) == 12 and flops_vit.embed_dim == bvit.embed_dim


def test_the_regime_follows_the_solver_and_the_model_args_record_it():
    """set_solver(method=...) on a recurrent bViT integrates the same block as an ODE (and back): the regime is
    read off the method, and the model args save_for_hf exports rebuild that model."""
    model = timm.create_model('bvit_tiny_cifar').eval()
    model.set_iterations(6)
    assert model.iterations == 6 and model.nfe == 0 and model._model_args['iterations'] == 6
    model.set_solver(steps=8)  # the recurrence's steps are its iterations
    assert model.iterations == 8 and model.regime == 'recurrent' and 'solver' not in model._model_args
    model.set_solver(method='rk4', steps=2)
    assert model.regime == 'ode' and model.solver.h == 4.
    args = model._model_args
    assert (args['regime'], args['solver'], args['steps'], args['iterations']) == ('ode', 'rk4', 2, 8)
    rebuilt = timm.create_model('bvit_tiny_cifar', **{k: v for k, v in args.items() if k != 'num_classes'})
    assert rebuilt.blocks.solver == model.blocks.solver
    model.set_solver(method='recurrence')
    assert model.regime == 'recurrent' and model.iterations == 2 and 'solver' not in model._model_args


def test_adams_intermediates_end_where_forward_features_does():
    """A multistep method integrates in one call to every grid point, so forward_intermediates (interval by interval)
    ends exactly where forward_features does (each interval restarting the solver missed by 2-3 %)."""
    torch.manual_seed(0)
    model = timm.create_model('bvit_tiny_cifar', regime='ode', solver='explicit_adams', steps=12).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        features = model.forward_features(x)
        nfe = model.nfe
        final, states = model.forward_intermediates(x, output_fmt='NLC', norm=True)
    assert torch.equal(final, features) and model.nfe == nfe
    assert torch.equal(states[-1], features[:, model.num_prefix_tokens:])


@pytest.mark.parametrize('name', ['bvit_tiny_cifar', 'odevit_tiny_cifar'])
def test_a_default_forward_reads_the_device_once(name, monkeypatch):
    """The finiteness check of the final state and the logits is one host read (one device sync on a GPU)."""
    model = timm.create_model(name).eval()
    reads = []
    for attr in ('__bool__', 'item', 'tolist', 'cpu'):
        original = getattr(torch.Tensor, attr)
        monkeypatch.setattr(torch.Tensor, attr, lambda self, *a, _o=original, _n=attr, **k: reads.append(_n) or _o(
            self, *a, **k))
    with torch.no_grad():
        model(torch.randn(2, 3, 32, 32))
    assert reads == ['__bool__']
    model.set_solver(check_finite=False)
    reads.clear()
    with torch.no_grad():
        model(torch.randn(2, 3, 32, 32))
    assert reads == []


def test_stages_take_numpy_integers():
    model = timm.create_model('bvit_tiny_cifar', stages=np.array([3, 12]))
    assert model.stages == (3, 12) and all(type(s) is int for s in model.stages)  # JSON-serialisable model args


def test_a_train_depth_that_makes_no_grid_names_train_depth():
    """An ODE bViT at h = 4 cannot run horizon 3: the error said 't_end=3 is not a whole number ...' only."""
    with pytest.raises(ValueError, match=r"train_depth \(3, 9\): its depth 3 \(horizon\) makes no grid of "
                                         r"method='rk4', steps=3, h=4, t_end=12.*t_end=3 is not a whole number"):
        timm.create_model('bvit_tiny_cifar', regime='ode', solver='rk4', steps=3, train_depth=(3, 9))
    model = timm.create_model('bvit_tiny_cifar', regime='ode', solver='rk4', steps=3)
    with pytest.raises(ValueError, match=r'train_depth \(4, 6\): its depth 5'):
        model.set_train_depth((4, 6))
    assert model.train_depth is None


def test_stages_beyond_the_grids_time_points_are_warned_about(caplog):
    """The recurrent example's stages on an RK4 grid of 3 steps: time points 1..3, stages up to 12."""
    with caplog.at_level('WARNING', logger='timm_odevit.models.bvit'):
        model = timm.create_model('bvit_tiny_cifar', regime='ode', solver='rk4', steps=3, stages=(3, 6, 9, 12))
    assert model.stages == (3, 6, 9, 12)
    assert 'stages (3, 6, 9, 12) lie beyond the 3 time points of this grid' in caplog.text
    assert 'give stages within 1..3' in caplog.text
    caplog.clear()
    with caplog.at_level('WARNING', logger='timm_odevit.models.bvit'):
        timm.create_model('bvit_tiny_cifar', stages=(3, 6, 9, 12))
        timm.create_model('bvit_tiny_cifar', regime='ode', solver='rk4', steps=3, stages=(1, 3))
    assert not caplog.text
