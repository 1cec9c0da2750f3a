"""The depth stack's intervals behave like a timm ViT's blocks on every ordinary path (issue 25): each
scenario is run on a timm ``VisionTransformer`` and on our models side by side."""
import copy
import threading

import pytest
import timm
import torch
from timm.models.vision_transformer import VisionTransformer

import timm_odevit  # noqa: F401
from timm_odevit import odeify

MODELS = {
    'odevit': lambda: timm.create_model('odevit_tiny_cifar', steps=4),
    'bvit': lambda: timm.create_model('bvit_tiny_cifar', iterations=4),
    'bvit_ode_rk4': lambda: timm.create_model('bvit_tiny_cifar', regime='ode', solver='rk4', steps=4),
    'odeified': lambda: odeify(_timm_vit()),
}


def _timm_vit(depth: int = 4) -> VisionTransformer:
    torch.manual_seed(0)
    return VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=depth, num_heads=2, num_classes=10)


def _model(name: str):
    torch.manual_seed(0)
    if name == 'timm':
        return _timm_vit().eval()
    return MODELS[name]().eval()


def _x(batch: int = 2) -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(batch, 3, 32, 32)


def _embed(model, x):
    return model.norm_pre(model.patch_drop(model._pos_embed(model.patch_embed(x))))


def _head(model, z):
    return model.forward_head(model.norm(z))


NAMES = ['timm', *MODELS]


@pytest.mark.parametrize('name', NAMES)
def test_no_grad_on_the_first_block_trains_the_later_ones(name):
    model, x = _model(name), _x()
    with torch.no_grad():
        z = model.blocks[0](_embed(model, x))
    for blk in list(model.blocks)[1:]:
        z = blk(z)
    assert z.requires_grad
    _head(model, z).sum().backward()
    shared = model.blocks[0] if name != 'timm' else model.blocks[-1]
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in shared.parameters())


@pytest.mark.parametrize('name', NAMES)
@pytest.mark.parametrize('kind', ['forward', 'pre'])
def test_in_place_hooks_change_the_output_and_train(name, kind):
    model, x = _model(name), _x()
    clean = model(x).detach()
    blk = model.blocks[1]
    if kind == 'forward':
        handle = blk.register_forward_hook(lambda m, args, out: out.mul_(0))
    else:
        handle = blk.register_forward_pre_hook(lambda m, args: args[0].zero_())
    with torch.no_grad():
        hooked = model(x)
    assert (hooked - clean).abs().max() > 1e-3  # timm's ViT: ~1.3
    model.zero_grad()
    model(x).sum().backward()  # with gradients on, the same hook trains
    handle.remove()
    torch.testing.assert_close(model(x).detach(), clean)


@pytest.mark.parametrize('name', NAMES)
def test_weights_changed_between_block_calls_are_used(name):
    model, x = _model(name), _x()
    with torch.no_grad():
        z = model.blocks[0](_embed(model, x))
        for p in model.parameters():
            p.add_(0.01)
        out = model.blocks[1](z)
        assert torch.equal(out, model.blocks[1](z.clone()))  # the new weights, not a state kept from before


@pytest.mark.parametrize('name', NAMES)
def test_full_backward_hooks_fire(name):
    model, x = _model(name), _x()
    fired = []
    model.blocks[1].register_full_backward_hook(lambda m, gin, gout: fired.append(gout[0].shape))
    model(x).sum().backward()
    assert len(fired) == 1


@pytest.mark.parametrize('name', NAMES)
def test_intermediates_own_small_storage_and_nothing_is_held(name):
    model, x = _model(name), _x()
    _, inter = model.forward_intermediates(x, indices=[1], output_fmt='NLC')
    feat = inter[0]
    tokens = feat.shape[0] * (feat.shape[1] + model.num_prefix_tokens) * feat.shape[2] * feat.element_size()
    assert feat.untyped_storage().nbytes() <= tokens  # at most the block output it is a view of
    if name != 'timm':
        assert not [k for k, v in vars(model.blocks).items() if isinstance(v, torch.Tensor)]


@pytest.mark.parametrize('name', MODELS)
def test_threads_give_the_sequential_answer(name):
    model = _model(name)
    xs = [_x(), _x() * 0.5, _x() + 1]
    with torch.no_grad():
        expected = [model.forward_intermediates(x, indices=[0, 2])[1] for x in xs]
        results = [None] * len(xs)

        def run(i):
            results[i] = model.forward_intermediates(xs[i], indices=[0, 2])[1]
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(xs))]
        [t.start() for t in threads]
        [t.join() for t in threads]
    for got, want in zip(results, expected):
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b)


def test_freezing_the_first_interval_freezes_the_shared_field():
    model = _model('odevit')
    model.blocks[0].requires_grad_(False)
    assert not any(p.requires_grad for p in model.blocks.parameters())
    assert not list(model.blocks[2].parameters())  # the other intervals hold no weights


# ---- changing the grid keeps the model whole ------------------------------------------------------------
def test_hooks_survive_a_grid_change_that_keeps_their_interval():
    model, x = _model('odevit'), _x()
    seen = []
    model.blocks[1].register_forward_hook(lambda m, a, out: seen.append(out))
    model.set_solver(steps=8)
    model(x)
    assert len(seen) == 1 and len(model.blocks) == 8


def test_a_grid_change_that_would_drop_hooked_intervals_is_refused():
    model = _model('odevit')
    model.blocks[3].register_forward_hook(lambda m, a, out: None)
    with pytest.raises(ValueError, match='intervals 3 carry hooks'):
        model.set_solver(steps=2)
    assert len(model.blocks) == 4


def test_features_only_hook_model_after_set_solver():
    feats = timm.create_model('odevit_tiny_cifar', steps=4, features_only=True, feature_cls='hook',
                              out_indices=(1, 2)).eval()
    x = _x()
    before = feats(x)
    feats.body.blocks.set_solver(steps=8)  # intervals 1, 2 stay (now at t = 2/8, 3/8)
    after = feats(x)
    assert len(after) == len(before) == 2
    with pytest.raises(ValueError, match='carry hooks'):
        feats.body.blocks.set_solver(steps=2)


def test_an_fx_extractor_runs_the_intervals_it_traced_on_todays_grid():
    """A grid change keeps the interval modules (their hooks stay put), so a torch.fx graph traced before runs the
    intervals it traced on the current grid (trace again after changing the grid); a removed interval refuses."""
    from timm.models._features_fx import create_feature_extractor
    model, x = _model('odevit'), _x()
    extractor = create_feature_extractor(model, return_nodes={'blocks.3': 'out'})
    model.set_solver(steps=8)
    with torch.no_grad():
        torch.testing.assert_close(extractor(x)['out'], model.blocks[:4](_embed(model, x)))
    model.set_solver(steps=2)
    with pytest.raises(RuntimeError, match='interval 2 was removed by a grid change'):
        extractor(x)


@pytest.mark.parametrize('name', ['odevit', 'odeified'])
def test_pruning_keeps_feature_info_recorded_args_and_export_in_step(name, tmp_path):
    model, x = _model(name), _x()
    stack = model.blocks
    full = model.forward_intermediates(x, indices=[1], intermediates_only=True)[0]
    model.prune_intermediate_layers(indices=[1])
    assert len(model.blocks) == 2 and len(model.feature_info) == 2
    assert model.blocks is stack  # cut in place
    torch.testing.assert_close(model.forward_intermediates(x, indices=[1], intermediates_only=True)[0], full)
    if name == 'odevit':
        assert model._model_args['t_end'] == pytest.approx(0.5)
        model.set_solver(method='rk4')
        assert model._model_args['solver'] == 'rk4'
        model.set_solver(method='euler')
        from timm.models import save_for_hf
        save_for_hf(model, tmp_path)
        reloaded = timm.create_model(f'local-dir:{tmp_path}', pretrained=True, num_classes=0).eval()
        torch.testing.assert_close(reloaded.forward_features(x), model.forward_features(x))
    else:
        twin = copy.deepcopy(model)
        twin.prune_intermediate_layers(indices=[0])  # the copy's own stack, not the original's
        assert len(twin.blocks) == len(twin.feature_info) == 1 and len(model.blocks) == 2


# ---- grad checkpointing --------------------------------------------------------------------------------
@pytest.mark.parametrize('name', MODELS)
def test_grad_checkpointing_recomputes_in_backward_with_the_same_gradients(name):
    model, x = _model(name), _x()
    calls = []
    evaluated = getattr(model.blocks.field, 'block', model.blocks.field)  # a recurrence calls the block itself
    evaluated.register_forward_pre_hook(lambda m, a: calls.append(torch.is_grad_enabled()))
    grads = []
    for enable in (False, True):
        model.set_grad_checkpointing(enable)
        model.zero_grad()
        calls.clear()
        model(x).sum().backward()
        grads.append([p.grad.clone() for p in model.blocks.parameters()])
        forward_calls = model.blocks.nfe
        assert len(calls) == forward_calls * (2 if enable else 1)  # recomputed once in backward
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
