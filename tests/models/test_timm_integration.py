"""Every family is a timm VisionTransformer whose blocks is a ContinuousDepthStack: timm's own code
paths (features, resizing, export, checkpoint filtering, layer decay) work on all of them."""
import json
import pathlib

import pytest
import timm
import torch
from timm.layers import resample_abs_pos_embed
from timm.models import VisionTransformer, save_for_hf
from timm.models._manipulate import reinit_non_persistent_buffers
from timm.optim import param_groups_layer_decay

import timm_odevit
from timm_odevit.layers import ContinuousDepthStack
from timm_odevit.layers.solver import METHODS, RUNGE_KUTTA_METHODS
from timm_odevit.models import checkpoint_filter_fn, embed_tokens
from timm_odevit.tasks import DeepSupervisionTask

SMALL = dict(embed_dim=32, num_heads=2)


def _build(family, **kwargs):
    torch.manual_seed(0)
    if family == 'odevit':
        return timm.create_model('odevit_tiny_cifar', steps=4, **SMALL, **kwargs).eval()
    if family == 'bvit':
        return timm.create_model('bvit_tiny_cifar', iterations=4, **SMALL, **kwargs).eval()
    return timm.create_model('vit_odeified', base='vit_tiny_patch16_224', img_size=32, patch_size=8, depth=3,
                             num_classes=10, **SMALL, **kwargs).eval()


def _x(size=32, n=2):
    torch.manual_seed(1)
    return torch.randn(n, 3, size, size)


def _reload(model, tmp_path, **kwargs):
    save_for_hf(model, tmp_path, safe_serialization=True)
    config = json.loads((tmp_path / 'config.json').read_text())
    return timm.create_model(f'local-dir:{tmp_path}', pretrained=True, **kwargs).eval(), config


def test_every_registered_model_is_enrolled_in_timms_own_model_tests():
    """timm's test_models.py runs a model's forward_intermediates tests by the module that registers it: a family
    moved to another module (the matched baselines to baselines.py) must stay enrolled."""
    import sys
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / 'timm_upstream'))
    from prepare import OUR_MODULES
    entrypoints = [timm.models.model_entrypoint(name) for name in timm.list_models()]
    ours = [e for e in entrypoints if e.__module__.startswith('timm_odevit.')]
    modules = {e.__module__.split('.')[-1] for e in ours}
    assert {f"'{m}'" for m in modules} == set(OUR_MODULES) and ours


@pytest.mark.parametrize('name', timm.list_models('odevit_*') + timm.list_models('bvit_*'))
def test_every_model_is_a_timm_vision_transformer(name):
    model = timm.create_model(name, device='meta')
    assert isinstance(model, VisionTransformer) and isinstance(model.blocks, ContinuousDepthStack)
    modules = dict(model.named_modules())
    assert [f['module'] for f in model.feature_info] == [f'blocks.{i}' for i in range(len(model.blocks))]
    assert all(f['module'] in modules for f in model.feature_info)
    assert model.pretrained_cfg['fixed_input_size'] is True  # the truth: other sizes need dynamic_img_size=True


@pytest.mark.parametrize('method', [m for m in METHODS if m != 'recurrence'])
def test_intermediates_are_the_one_call_integration_for_every_solver(method):
    # every method: forward_intermediates (interval by interval) = the states of one integration (Runge–Kutta steps,
    # or one odeint call to all grid points for Adams / adaptive methods), ending exactly where forward_features does
    model = _build('odevit', solver=method).double()
    x = _x().double()
    with torch.no_grad():
        features = model.forward_features(x)
        nfe = model.nfe
        final, inter = model.forward_intermediates(x, output_fmt='NLC', return_prefix_tokens=True)
        assert torch.equal(final, features) and model.nfe == nfe
        expected = model.blocks.trajectory(embed_tokens(model, x), list(range(4)))
        for (spatial, prefix), state in zip(inter, expected):
            assert torch.equal(torch.cat([prefix, spatial], 1), state)
        early = model.forward_intermediates(x, indices=[1], stop_early=True, intermediates_only=True)
        assert torch.equal(early[0], model.forward_intermediates(x, indices=[1], intermediates_only=True)[0])


@pytest.mark.parametrize('family', ['odevit', 'bvit', 'odeified'])
def test_features_only_hook_fx_and_getter(family):
    model = _build(family)
    x = _x()
    with torch.no_grad():
        states = model.forward_intermediates(x, indices=[1, 3 if family != 'odeified' else 2], output_fmt='NLC',
                                             intermediates_only=True)
    out_indices = (1, 3) if family != 'odeified' else (1, 2)
    kwargs = dict(features_only=True, out_indices=out_indices)
    for feature_cls in ('hook', 'fx', 'getter'):
        feats = _build(family, feature_cls=feature_cls, **kwargs)
        with torch.no_grad():
            out = feats(x)
        n = model.num_prefix_tokens
        out = [o.flatten(2).transpose(1, 2) if o.ndim == 4 else o[:, n:] for o in out]
        for o, s in zip(out, states):
            torch.testing.assert_close(o, s, msg=feature_cls)
        names = [k for k, _ in feats.named_parameters()]
        assert any('blocks.0.field.' in k for k in names), feature_cls  # the field is part of the extractor


def test_set_input_size_and_set_solver_survive_save_for_hf(tmp_path):
    model = _build('odevit')
    model.set_input_size((48, 48))
    model.set_solver(method='midpoint', step_size=0.5)
    loaded, config = _reload(model, tmp_path)
    assert config['model_args']['img_size'] == [48, 48] and config['model_args']['solver'] == 'midpoint'
    assert config['pretrained_cfg']['input_size'] == [3, 48, 48] and config['pretrained_cfg']['fixed_input_size']
    assert loaded.solver == model.solver and loaded.patch_embed.img_size == (48, 48)
    x = _x(48)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x))
    assert loaded.nfe == model.nfe == 4


@pytest.mark.parametrize('family', ['odevit', 'bvit', 'odeified'])
def test_the_data_config_follows_the_input_size_unless_the_caller_overlays_it(family):
    """timm's ViT keeps a pretrained_cfg_overlay input_size; ours too. Without one, the resolved size is the
    model's, at creation and after set_input_size (what a save_for_hf reload resolves)."""
    model = _build(family, dynamic_img_size=True, pretrained_cfg_overlay=dict(input_size=(3, 48, 48)))
    assert timm.data.resolve_model_data_config(model)['input_size'] == (3, 48, 48)
    model = _build(family)
    model.set_input_size((64, 64))
    follows = family != 'odeified'  # an odeified ViT is timm's VisionTransformer class: its set_input_size is timm's
    assert timm.data.resolve_model_data_config(model)['input_size'] == ((3, 64, 64) if follows else (3, 32, 32))


@pytest.mark.parametrize('shorten', ['set_iterations', 'prune'])
def test_bvit_stages_survive_a_shorter_horizon_and_save_for_hf(shorten, tmp_path):
    model = _build('bvit', stages=(2, 4))
    if shorten == 'set_iterations':
        model.set_iterations(3)
    else:
        model.prune_intermediate_layers([2], prune_head=False)
    assert model.stages == (2, 4) and len(model.blocks) == 3
    loaded, config = _reload(model, tmp_path)
    assert config['model_args']['stages'] == [2, 4] and loaded.stages == (2, 4) and len(loaded.blocks) == 3
    with torch.no_grad():
        torch.testing.assert_close(loaded(_x()), model(_x()))
    with pytest.raises(ValueError, match='outside the horizon'):
        loaded.forward_stages(_x())
    task = DeepSupervisionTask(loaded, criterion=torch.nn.CrossEntropyLoss()).train()
    with pytest.raises(ValueError, match=r'stages \(2, 4\) lie outside the horizon: time points are 1\.\.3'):
        task(_x(), torch.zeros(2, dtype=torch.long))  # deep supervision refuses them at its first step
    loaded.set_iterations(4)
    assert len(loaded.forward_stages(_x())) == 2


def test_bvit_default_stage_follows_the_horizon():
    model = _build('bvit')
    assert model.stages == (4,)
    model.set_iterations(6)
    assert model.stages == (6,)
    with torch.no_grad():
        torch.testing.assert_close(model.forward_stages(_x())[-1], model(_x()))


@pytest.mark.parametrize('regime', ['recurrent', 'ode'])
def test_set_iterations_survives_save_for_hf(regime, tmp_path):
    kwargs = dict(regime='ode', solver='rk4', steps=2) if regime == 'ode' else {}
    model = _build('bvit', **kwargs)
    model.set_iterations(8)
    loaded, config = _reload(model, tmp_path)
    assert config['model_args']['iterations'] == 8 and loaded.iterations == 8 and len(loaded.blocks) == len(model.blocks)
    with torch.no_grad():
        torch.testing.assert_close(loaded(_x()), model(_x()))


def test_dynamic_size_is_written_as_not_fixed(tmp_path):
    model = _build('odevit', dynamic_img_size=True)
    loaded, config = _reload(model, tmp_path)
    assert config['pretrained_cfg']['fixed_input_size'] is False
    assert loaded(_x(48)).shape == (2, 10)
    fixed, config = _reload(_build('odevit'), tmp_path / 'fixed')
    assert config['pretrained_cfg']['fixed_input_size'] is True
    with pytest.raises(AssertionError, match=r"Input height \(48\) doesn't match model \(32\)"):
        fixed(_x(48))


def test_non_square_checkpoint_into_another_grid(tmp_path):
    model = _build('odevit', img_size=(32, 48))
    loaded, _ = _reload(model, tmp_path, img_size=64)
    expected = resample_abs_pos_embed(model.pos_embed, new_size=(16, 16), old_size=(8, 12), num_prefix_tokens=1)
    torch.testing.assert_close(loaded.pos_embed, expected)
    assert loaded(_x(64)).shape == (2, 10)
    # a bare state dict carries no source grid: the error says how to give it, the metadata makes it load
    target = _build('odevit', img_size=64)
    with pytest.raises(ValueError, match='unknown non-square grid'):
        checkpoint_filter_fn(model.state_dict(), target)
    target.pretrained_model_args = {'img_size': (32, 48)}
    torch.testing.assert_close(checkpoint_filter_fn(model.state_dict(), target)['pos_embed'], expected)


def test_get_intermediate_layers_and_pooling():
    model = _build('odevit', global_pool='avg', final_norm=True)
    x = _x()
    layers = model.get_intermediate_layers(x, n=2, reshape=True)
    assert [t.shape for t in layers] == [(2, 32, 8, 8)] * 2
    assert not isinstance(model.fc_norm, torch.nn.Identity) and isinstance(model.norm, torch.nn.Identity)
    assert model.pool(model.forward_features(x)).shape == (2, 32)
    with pytest.raises(ValueError, match='attention masks'):
        model(x, attn_mask=torch.ones(75, 75))
    with pytest.raises(ValueError, match='attention masks'):
        model.forward_intermediates(x, attn_mask=torch.ones(75, 75))


@pytest.mark.parametrize('family', ['odevit', 'bvit', 'odeified'])
def test_layer_decay_orders_stem_below_depth_below_head(family):
    model = _build(family, final_norm=True) if family != 'odeified' else _build(family)
    scale = {}
    for group in param_groups_layer_decay(model, layer_decay=0.75):
        for p in group['params']:
            scale[id(p)] = group['lr_scale']
    by_name = {n: scale[id(p)] for n, p in model.named_parameters()}
    stem = max(v for n, v in by_name.items() if n.startswith(('patch_embed', 'pos_embed', 'cls_token')))
    depth = {v for n, v in by_name.items() if n.startswith('blocks.')}
    head = min(v for n, v in by_name.items() if n.startswith('head'))
    assert len(depth) == 1 and stem < depth.pop() < head == 1.0


@pytest.mark.parametrize('family', ['bvit', 'odeified'])
def test_grad_checkpointing_gives_the_same_gradients(family):
    model = _build(family).train()  # odeified: timm's own set_grad_checkpointing / checkpoint_seq over intervals
    grads = []
    for enable in (False, True):
        model.zero_grad()
        model.set_grad_checkpointing(enable)
        model(_x()).sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for n in grads[0]:
        torch.testing.assert_close(grads[1][n], grads[0][n], rtol=1e-5, atol=1e-7, msg=n)


# ---- weights --------------------------------------------------------------------------------------
def test_wrapped_train_checkpoints_load_and_pre_release_names_are_refused():
    """train.py checkpoints saved through DDP (``module.``) and torch.compile (``_orig_mod.``) load (timm's
    clean_state_dict); the names before the stack refactor were never released and are refused, naming the keys."""
    model = _build('odevit')
    twin = _build('odevit')
    wrapped = {'state_dict': {f'_orig_mod.module.{k}': v for k, v in model.state_dict().items()}}
    twin.load_state_dict(checkpoint_filter_fn(wrapped, twin))
    with torch.no_grad():
        torch.testing.assert_close(twin(_x()), model(_x()))
    old = {k.replace('blocks.0.', 'ode.'): v for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r'missing keys .*unexpected keys \[.ode\.field'):
        checkpoint_filter_fn(old, twin)


def test_odeify_round_trips_through_save_for_hf(tmp_path):
    torch.manual_seed(0)
    vit = timm.create_model('deit_tiny_distilled_patch16_224', img_size=32, patch_size=8, depth=3, num_classes=10)
    ode = timm_odevit.odeify(vit, field='odevit').eval()
    ode.blocks.set_solver(method='rk4', steps=6)  # recorded in the model args, like set_input_size
    loaded, config = _reload(ode, tmp_path)
    assert config['architecture'] == 'vit_odeified'
    args = config['model_args']
    assert (args['base'], args['field'], args['solver'], args['steps'], args['depth']) == (
        'deit_tiny_distilled_patch16_224', 'odevit', 'rk4', 6, 3)
    assert type(loaded) is type(ode) and loaded.blocks.solver == ode.blocks.solver
    with torch.no_grad():
        assert torch.equal(loaded(_x()), ode(_x()))
    # its own weights also load by name through a pretrained_cfg source (here a local file with 10 classes)
    named = timm.create_model('vit_odeified', pretrained=True, pretrained_cfg_overlay=dict(
        file=str(tmp_path / 'model.safetensors'), num_classes=10), **args).eval()
    with torch.no_grad():
        assert torch.equal(named(_x()), ode(_x()))


@pytest.mark.parametrize('name', ['odevit_tiny_cifar', 'bvit_tiny_cifar', 'vit_odeified'])
def test_a_model_built_on_the_meta_device_is_fully_initialised_by_init_weights(name):
    """timm's deferred init: create on 'meta', to_empty, init_weights() — every parameter and buffer is set (the
    NaN fill would survive in anything init_weights skips: norms, the patch-embedding conv), as with timm's ViT."""
    model = timm.create_model(name, device='meta').to_empty(device='cpu')
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            if t.is_floating_point():
                t.fill_(float('nan'))
    model.init_weights()
    left = [n for n, t in list(model.named_parameters()) + list(model.named_buffers())
            if t.is_floating_point() and not torch.isfinite(t).all()]
    assert left == []
    size = model.pretrained_cfg['input_size']
    assert torch.isfinite(model.eval()(torch.randn(1, *size))).all()
    norm = next(m for m in model.modules() if hasattr(m, 'weight') and 'Norm' in type(m).__name__)
    assert torch.equal(norm.weight, torch.ones_like(norm.weight))  # reset to its init, not random



def test_computed_buffers_are_rebuilt_by_init_weights_and_timms_hook():
    """The time code's frequencies are a non-persistent (computed) buffer: init_weights after to_empty and
    timm's reinit_non_persistent_buffers (after half(), or a meta load with assign=True) recompute them."""
    ref = timm.create_model('odevit_tiny_cifar', steps=2, time_conditioned=True).eval()
    torch.nn.init.normal_(ref.field.time_embed.proj.weight, std=.5)  # as after training
    model = timm.create_model('odevit_tiny_cifar', steps=2, time_conditioned=True, device='meta').to_empty(device='cpu')
    model.init_weights()
    model.load_state_dict(ref.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(_x()), ref(_x()))
    meta = timm.create_model('odevit_tiny_cifar', steps=2, time_conditioned=True, device='meta')
    meta.load_state_dict(ref.state_dict(), assign=True)
    assert 'field.time_embed' in ' '.join(reinit_non_persistent_buffers(meta.half().float()))
    with torch.no_grad():
        torch.testing.assert_close(meta.eval()(_x()), ref(_x()), atol=2e-3, rtol=2e-3)
    assert torch.equal(meta.field.time_embed.freqs, ref.field.time_embed.freqs)


@pytest.mark.parametrize('name', ['odevit_tiny_cifar', 'bvit_tiny_cifar'])
def test_torchscript_says_why_it_cannot_script_the_model(name):
    """torch.jit.script (and timm's validate.py --torchscript) get a clear error naming the alternatives, not a
    TorchScript frontend error from inside the solver; an FX graph module holding the stack gets it too."""
    model = timm.create_model(name).eval()
    with pytest.raises(RuntimeError, match='TorchScript cannot compile the ODE depth.*torch.compile, torch.export'):
        torch.jit.script(model)
    graph = timm.models.create_feature_extractor(model, ['blocks'])  # the stack is an FX leaf
    with pytest.raises(RuntimeError, match='TorchScript cannot compile the ODE depth'):
        torch.jit.script(graph)


@pytest.mark.parametrize('name', ['odevit_tiny_cifar', 'bvit_tiny_cifar'])
def test_fullgraph_compile_compiles_and_eager_keeps_the_finiteness_check(name):
    """torch.compile(fullgraph=True) as for timm's ViT; the finiteness check is a host read, eager only: the compiled
    graph hands NaN back (as timm's ViT and an exported graph do), the eager model raises naming the cause."""
    import torch._dynamo
    torch._dynamo.reset()
    model = timm.create_model(name, iterations=3) if name.startswith('bvit') else timm.create_model(name, steps=3)
    model.eval()
    x = torch.randn(2, 3, 32, 32)
    compiled = torch.compile(model, backend='eager', fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
        model.pos_embed.fill_(float('nan'))
        assert torch.isnan(compiled(x)).all()
        with pytest.raises(FloatingPointError, match='already holds NaN/Inf'):
            model(x)
    torch._dynamo.reset()


@pytest.mark.parametrize('name', ['odevit_tiny_cifar', 'bvit_tiny_cifar'])
def test_a_vit_depth_argument_is_refused(name):
    """timm's ViT kwarg has no meaning here (the depth is steps / iterations): Python's TypeError names it."""
    with pytest.raises(TypeError, match="unexpected keyword argument 'depth'"):
        timm.create_model(name, depth=12)


@pytest.mark.parametrize('family', ['odevit', 'bvit'])
def test_blocks_replaced_by_a_sequential_of_the_intervals_still_run(family):
    """What a timm ViT allows: ``model.blocks = nn.Sequential(*model.blocks)`` steps through the same intervals."""
    model = _build(family)
    with torch.no_grad():
        expected = model(_x())
        model.blocks = torch.nn.Sequential(*model.blocks)
        torch.testing.assert_close(model(_x()), expected)
