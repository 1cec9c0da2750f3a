"""Anytime inference: early exit along the integration, and accuracy at fixed budgets."""
import numpy as np
import pytest
import timm
import torch
from timm.models.vision_transformer import VisionTransformer

from timm_odevit.anytime import (
    Confident, ExitRule, Readout, Settled, accuracy_at_budgets, best_grid_for_budget, early_exit,
)
from timm_odevit.models import embed_tokens

TINY = dict(embed_dim=32, num_heads=2, reg_tokens=1)
MODELS = {
    'odevit_euler4': lambda: timm.create_model('odevit_tiny_cifar', steps=4, **TINY),
    'odevit_midpoint3': lambda: timm.create_model('odevit_tiny_cifar', solver='midpoint', steps=3, **TINY),
    'bvit_recurrent4': lambda: timm.create_model('bvit_tiny_cifar', iterations=4, **TINY),
}


def _model(name='odevit_euler4'):
    torch.manual_seed(0)
    return MODELS[name]().eval()


def _images(n=6, seed=1):
    return torch.randn(n, 3, 32, 32, generator=torch.Generator().manual_seed(seed))


def _readouts(model, x):
    """Logits after every interval, stepping the stack by hand: (L, B, C)."""
    with torch.no_grad():
        z, out = embed_tokens(model, x), []
        for interval in model.blocks:
            z = interval(z)
            out.append(model.forward_head(model.norm(z)))
    return torch.stack(out)


def _evals_per_step(model):
    return model.blocks.solver.exact_evals(1)


def _split_confidence(model, x):
    """A threshold between the step-1 confidences of the images, in the widest gap near the middle, so that
    some images stop after step 1 and the others go on."""
    conf = _readouts(model, x)[0].softmax(-1).amax(-1).sort().values
    lo, hi = len(conf) // 4, 3 * len(conf) // 4
    gaps = conf[lo + 1:hi + 1] - conf[lo:hi]
    k = lo + int(gaps.argmax())
    return float((conf[k] + conf[k + 1]) / 2)


@pytest.mark.parametrize('name', list(MODELS))
def test_rule_that_never_fires_is_the_full_forward(name):
    model = _model(name)
    x = _images()
    L = len(model.blocks)
    out = early_exit(model, x, rule=Settled(patience=L))  # needs L + 1 agreeing readouts: never within L steps
    with torch.no_grad():
        full = model(x)
    torch.testing.assert_close(out.logits, full)
    assert torch.equal(out.predictions, full.argmax(-1))
    assert out.steps.tolist() == [L] * len(x)
    assert out.nfe.tolist() == [L * _evals_per_step(model)] * len(x)
    with torch.no_grad():
        model(x)
    assert out.nfe.tolist() == [model.nfe] * len(x)


@pytest.mark.parametrize('name', list(MODELS))
def test_rule_that_fires_at_once_uses_one_step(name):
    model = _model(name)
    x = _images()
    out = early_exit(model, x, rule=Confident(threshold=1e-6))
    assert out.steps.tolist() == [1] * len(x)
    assert out.nfe.tolist() == [_evals_per_step(model)] * len(x)
    torch.testing.assert_close(out.logits, _readouts(model, x)[0])


@pytest.mark.parametrize('patience', [1, 2])
def test_settled_stops_at_the_first_run_of_patience_agreeing_steps(patience):
    model = _model()
    x = _images(8)
    preds = _readouts(model, x).argmax(-1)  # (L, B)
    L = len(model.blocks)
    expected = []
    for b in range(len(x)):
        stop = next((s for s in range(patience, L) if all(preds[s - j, b] == preds[s, b] for j in range(patience + 1))),
                    L - 1)
        expected.append(stop + 1)
    out = early_exit(model, x, rule=Settled(patience=patience))
    assert out.steps.tolist() == expected
    assert min(expected) == patience + 1  # at least one image settles as early as the rule allows
    assert out.nfe.tolist() == expected  # Euler: one evaluation per step
    assert torch.equal(out.predictions, preds[torch.tensor(expected) - 1, torch.arange(len(x))])


def test_combined_rules():
    model = _model()
    x = _images()
    now = Confident(threshold=1e-6)
    assert early_exit(model, x, rule=Settled(patience=3) | now).steps.tolist() == [1] * len(x)
    both = early_exit(model, x, rule=Settled(patience=1) & now).steps
    assert both.min() >= 2  # & waits for the slower rule
    assert torch.equal(both, early_exit(model, x, rule=Settled(patience=1)).steps)


def test_confident_fires_on_its_threshold():
    """>=, not >: a readout exactly at the threshold stops, so saturated logits stop Confident(1.0) at step 1."""
    probs = torch.tensor([[0.5, 0.5], [0.25, 0.75]])
    readout = Readout(1, probs.log(), probs, probs.argmax(-1), torch.zeros(2, dtype=torch.long))
    assert Confident(0.5)(readout).tolist() == [True, True]
    assert Confident(0.75)(readout).tolist() == [False, True]
    model = _model()
    with torch.no_grad():
        model.head.weight.zero_()
        model.head.bias.copy_(torch.tensor([1e4] + [0.] * (model.num_classes - 1)))  # softmax exactly 1.0
    out = early_exit(model, _images(), rule=Confident(1.0))
    assert out.steps.tolist() == [1] * len(out.steps) and out.predictions.tolist() == [0] * len(out.steps)


def test_finished_images_leave_the_batch():
    model = _model()
    x = _images(8)
    rule = Confident(threshold=_split_confidence(model, x))
    sizes = []
    handle = model.blocks.field.register_forward_hook(lambda m, args, out: sizes.append(args[1].shape[0]))
    try:
        out = early_exit(model, x, rule=rule)
    finally:
        handle.remove()
    assert 0 < int((out.steps == 1).sum()) < len(x)  # some stop after one step, some go on
    running = [int((out.steps >= s).sum()) for s in range(1, int(out.steps.max()) + 1)]
    assert sizes == running  # Euler: one field call per step, on the images still running
    assert sizes[1] < len(x)
    assert int(out.nfe.sum()) == sum(sizes)


def test_predictions_match_independent_runs():
    model = _model()
    x = _images(8)
    rule = Confident(threshold=_split_confidence(model, x)) | Settled(patience=2)
    out = early_exit(model, x, rule=rule)
    assert len(set(out.steps.tolist())) > 1
    for b in range(len(x)):
        one = early_exit(model, x[b:b + 1], rule=rule)
        assert one.predictions.item() == out.predictions[b].item()
        assert one.steps.item() == out.steps[b].item() and one.nfe.item() == out.nfe[b].item()
        torch.testing.assert_close(one.logits[0], out.logits[b], rtol=1e-4, atol=1e-5)
    again = early_exit(model, x, rule=rule)
    assert all(torch.equal(a, b) for a, b in zip(out, again))


def test_max_steps_caps_the_integration():
    model = _model()
    x = _images()
    out = early_exit(model, x, rule=Settled(patience=4), max_steps=2)
    assert out.steps.tolist() == [2] * len(x) and out.nfe.tolist() == [2] * len(x)
    torch.testing.assert_close(out.logits, _readouts(model, x)[1])


def test_eval_mode_without_grad_and_the_mode_restored():
    torch.manual_seed(0)
    model = timm.create_model('odevit_tiny_cifar', steps=3, drop_rate=0.5, **TINY).train()
    x = _images().requires_grad_()
    out = early_exit(model, x, rule=Settled(patience=1))
    assert model.training and all(m.training for m in model.modules())
    assert not out.logits.requires_grad
    model.eval()
    assert all(torch.equal(a, b) for a, b in zip(out, early_exit(model, x, rule=Settled(patience=1))))


def test_early_exit_refuses_bad_input():
    model = _model()
    x = _images(2)
    for bad in ('patience', 0.9, lambda r: r.step > 1):
        with pytest.raises(TypeError, match='ExitRule'):
            early_exit(model, x, rule=bad)
    with pytest.raises(TypeError, match='ExitRule'):
        Settled() | 0.9
    for make in (lambda: Settled(0), lambda: Settled(1.5), lambda: Settled(True), lambda: Confident(0),
                 lambda: Confident(1.5), lambda: Confident(float('nan'))):
        with pytest.raises(ValueError):
            make()
    with pytest.raises(ValueError, match='empty batch'):
        early_exit(model, x[:0])
    with pytest.raises(ValueError, match='B, C, H, W'):
        early_exit(model, x[0])
    for max_steps in (0, len(model.blocks) + 1, 2.0):
        with pytest.raises(ValueError, match='max_steps'):
            early_exit(model, x, max_steps=max_steps)
    vit = VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=2, num_classes=10)
    with pytest.raises(TypeError, match='no ODE trajectory'):
        early_exit(vit, x)
    headless = timm.create_model('odevit_tiny_cifar', steps=2, num_classes=0, **TINY)
    with pytest.raises(ValueError, match='classifier head'):
        early_exit(headless, x)

    class Broken(ExitRule):
        def __call__(self, readout):
            return readout.unchanged  # not a bool tensor
    with pytest.raises(TypeError, match='bool tensor'):
        early_exit(model, x, rule=Broken())


def _loader(n=8, batch=4):
    x = _images(n)
    y = torch.arange(n) % 10
    return [(x[i:i + batch], y[i:i + batch]) for i in range(0, n, batch)]


def test_accuracy_at_budgets_measures_each_grid_and_restores_the_solver():
    model = _model()
    model.train()
    solver, args = model.blocks.solver, dict(model._model_args)
    loader = _loader()
    table = accuracy_at_budgets(model, loader, grids=[2, ('midpoint', 2), ('euler', 6)])
    assert model.blocks.solver == solver and len(model.blocks) == 4 and model._model_args == args
    assert model.training
    assert [r['grid'] for r in table] == ['euler 2', 'midpoint 2', 'euler 6']
    assert [r['nfe'] for r in table] == [2, 4, 6] and all(r['images'] == 8 for r in table)
    model.eval()
    for row in table:
        model.set_solver(**row['changes'])
        with torch.no_grad():
            correct = sum(int((model(x).argmax(-1) == y).sum()) for x, y in loader)
        assert row['top1'] == pytest.approx(100 * correct / 8)
    model.blocks.solver = solver


def test_accuracy_at_budgets_recurrent_iterations():
    model = _model('bvit_recurrent4')
    table = accuracy_at_budgets(model, _loader(4), grids=[1, 2, ('recurrence', 6)])
    assert [r['nfe'] for r in table] == [1, 2, 6] and model.iterations == 4


def test_accuracy_at_budgets_restores_the_solver_on_error():
    model = _model()
    solver = model.blocks.solver

    def failing():
        yield _loader()[0]
        raise RuntimeError('loader broke')
    with pytest.raises(RuntimeError, match='loader broke'):
        accuracy_at_budgets(model, failing(), grids=[2, 6])
    assert model.blocks.solver == solver and len(model.blocks) == 4


def test_accuracy_at_budgets_refuses_bad_input():
    model = _model()
    solver = model.blocks.solver
    for grids in ([], 'euler', [0], [('nope', 2)], [('euler', 0)], ['euler'], [2.5]):
        with pytest.raises(ValueError):
            accuracy_at_budgets(model, _loader(), grids=grids)
    x, y = _loader()[0]
    with pytest.raises(ValueError, match='class indices'):
        accuracy_at_budgets(model, [(x, y.float())], grids=[2])
    with pytest.raises(ValueError, match='no images'):
        accuracy_at_budgets(model, [], grids=[2])
    with pytest.raises(TypeError, match='no ODE trajectory'):
        accuracy_at_budgets(VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=2),
                            _loader(), grids=[2])
    assert model.blocks.solver == solver


def test_best_grid_for_budget():
    table = [{'grid': 'euler 2', 'nfe': 2., 'top1': 20.}, {'grid': 'euler 4', 'nfe': 4., 'top1': 46.},
             {'grid': 'midpoint 2', 'nfe': 4., 'top1': 46.}, {'grid': 'euler 6', 'nfe': 6., 'top1': 69.},
             {'grid': 'euler 8', 'nfe': 8., 'top1': 68.}]
    assert best_grid_for_budget(table, 3)['grid'] == 'euler 2'
    assert best_grid_for_budget(table, 5)['grid'] == 'euler 4'  # tie at equal cost: the first measured
    assert best_grid_for_budget(table, 100)['grid'] == 'euler 6'  # more NFE is not always better
    with pytest.raises(ValueError, match='cheapest, euler 2'):
        best_grid_for_budget(table, 1)
    # a table that is not accuracy_at_budgets' rows, or a budget that is not a number: Python's own errors
    with pytest.raises(ValueError, match='empty'):
        best_grid_for_budget([], 4)
    with pytest.raises(KeyError, match='nfe'):
        best_grid_for_budget([{'grid': 'x'}], 4)
    with pytest.raises(TypeError, match="'<=' not supported"):
        best_grid_for_budget(table, 'many')


def test_best_grid_for_budget_ties_go_to_the_cheaper_grid():
    """A tie in top-1 between grids of different NFE goes to the cheaper one, whichever was measured first."""
    dear = {'grid': 'midpoint 4', 'nfe': 8., 'top1': 69.}
    cheap = {'grid': 'euler 6', 'nfe': 6., 'top1': 69.}
    worse = {'grid': 'euler 2', 'nfe': 2., 'top1': 20.}
    for table in ([dear, cheap, worse], [worse, cheap, dear]):
        assert best_grid_for_budget(table, 8)['grid'] == 'euler 6'
    assert best_grid_for_budget([dear, cheap], 7)['grid'] == 'euler 6'


def test_measuring_restores_every_modules_mode_and_training_keeps_drawing_depths():
    """accuracy_at_budgets changes the grid (new interval modules); afterwards every module is back in its mode, so a
    train_depth model with a hook on its field trains on drawn depths, not on the fixed grid."""
    torch.manual_seed(0)
    model = timm.create_model('odevit_tiny_cifar', steps=4, train_depth=(1, 3), **TINY).train()
    calls = []
    model.blocks.field.register_forward_hook(lambda *args: calls.append(1))
    accuracy_at_budgets(model, _loader(), grids=[2, 6])
    assert all(m.training for m in model.modules())
    depths = set()
    for _ in range(12):
        calls.clear()
        model(_images(2))
        depths.add(len(calls))
    assert depths <= {1, 2, 3} and len(depths) > 1


def test_numpy_integer_grids_are_taken():
    table = accuracy_at_budgets(_model(), _loader(), grids=[np.int64(2), np.int32(4)])
    assert [r['nfe'] for r in table] == [2, 4]


def test_evaluation_restores_each_modules_mode_and_takes_numpy_arrays(tmp_path):
    """evaluate / evaluate_grids measure in eval mode and give every module its own mode back: a train_depth model
    keeps drawing depths afterwards (it used to be left in eval mode, training on the fixed grid)."""
    from PIL import Image
    from timm_odevit.evaluation import evaluate, evaluate_grids
    for c, name in enumerate(timm.models.get_pretrained_cfg('odevit_tiny_cifar').label_names):
        (tmp_path / 'test' / name).mkdir(parents=True)
        Image.new('RGB', (32, 32), (25 * c, 0, 0)).save(tmp_path / 'test' / name / 'a.png')
    model = timm.create_model('odevit_tiny_cifar', steps=2, train_depth=(2, 4)).train()
    model.patch_embed.eval()
    modes = {n: m.training for n, m in model.named_modules()}
    evaluate(model, str(tmp_path), 'test', workers=0)
    evaluate_grids(model, str(tmp_path), 'test', grids=np.array([2, 3]), workers=0)
    assert {n: m.training for n, m in model.named_modules()} == modes
    assert len(accuracy_at_budgets(model.eval(), _loader(), grids=np.array([2, 3]))) == 2


def test_early_exit_takes_a_numpy_max_steps():
    model, x = _model(), _images()
    expected = early_exit(model, x, rule=Settled(1), max_steps=3)
    got = early_exit(model, x, rule=Settled(1), max_steps=np.int64(3))
    assert torch.equal(got.predictions, expected.predictions) and torch.equal(got.steps, expected.steps)
    assert int(got.steps.max()) <= 3


@pytest.mark.parametrize('name, grid, words', [
    ('bvit_recurrent4', ('euler', 3), "grid 'euler 3': the model iterates its block as a recurrence"),
    ('bvit_recurrent4', {'method': 'rk4', 'steps': 1}, 'as a recurrence, which no ODE method approximates'),
    ('odevit_euler4', ('recurrence', 3), "grid 'recurrence 3': the model integrates an ODE"),
])
def test_accuracy_at_budgets_refuses_a_grid_that_switches_the_regime(name, grid, words):
    """A recurrence run with an ODE method (or an ODE run as a recurrence) is another model, not a budget: refused
    before anything is measured (a recurrent bViT at ('euler', 3) was measured as a row 'euler 3')."""
    model = _model(name)
    solver = model.blocks.solver
    with pytest.raises(ValueError, match=words):
        accuracy_at_budgets(model, _loader(), grids=[2, grid])
    assert model.blocks.solver == solver
