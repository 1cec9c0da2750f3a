"""Bad input to the models (models/_common.py): arguments, non-finite results and their causes, weights."""
import json
import math
import pathlib
import shutil

import pytest
import timm
import torch
from safetensors.torch import load_file, save_file
from timm.models import save_for_hf

import timm_odevit  # noqa: F401

MODELS = ('odevit_tiny_cifar', 'bvit_tiny_cifar')
X = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))


# ---- construction arguments ----------------------------------------------------------------------
@pytest.mark.parametrize('name', MODELS)
@pytest.mark.parametrize('kwargs,words', [
    ({'mlp_ratio': 0}, 'mlp_ratio'),
    ({'mlp_ratio': math.inf}, 'mlp_ratio'),
    ({'num_classes': -1}, 'num_classes must be an integer >= 0'),
    ({'num_classes': 2.5}, 'num_classes must be an integer >= 0'),
    ({'drop_path_rate': 1.5}, 'drop_path_rate is a probability in [0, 1)'),
    ({'attn_drop_rate': -0.1}, 'attn_drop_rate is a probability'),
    ({'drop_rate': 1.0}, 'drop_rate is a probability'),
    ({'patch_size': 0}, 'patch_size must be positive integers'),
    ({'patch_size': 5}, 'not divisible by patch_size'),
    ({'img_size': 0}, 'img_size must be positive integers'),
    ({'in_chans': 0}, 'in_chans must be an integer >= 1'),
    ({'num_heads': 0}, 'num_heads must be an integer >= 1'),
    ({'reg_tokens': -1}, 'reg_tokens must be an integer >= 0'),
])
def test_bad_architecture_arguments(name, kwargs, words):
    with pytest.raises(ValueError, match=words.replace('[', r'\[').replace('(', r'\(').replace(')', r'\)')):
        timm.create_model(name, **kwargs)


@pytest.mark.parametrize('name', MODELS)
def test_embed_dim_not_divisible_by_num_heads_is_timms_error(name):
    with pytest.raises(AssertionError, match='dim should be divisible by num_heads'):
        timm.create_model(name, embed_dim=250, num_heads=4)


def test_solver_options_that_are_no_mapping_are_named():
    words = r"solver_options \(torchdiffeq options\) must be a mapping.*got a str: 'x'"
    for name in MODELS:
        regime = {'regime': 'ode'} if 'bvit' in name else {}
        with pytest.raises(ValueError, match=words):
            timm.create_model(name, solver='dopri5', solver_options='x', **regime)


SAVED_ARGS = r'odevit_tiny_cifar with the model_args of {config} \(and any kwargs given over them\): '


@pytest.mark.parametrize('edit, words', [
    (lambda c: c.update(num_classes='10'), r"{config}: num_classes must be an integer >= 0, got '10'"),
    (lambda c: c['model_args'].update(solver_options='x'),
     SAVED_ARGS + r'solver_options \(torchdiffeq options\) must be a mapping'),
    (lambda c: c['model_args'].update(steps=0), SAVED_ARGS + 'steps must be'),
])
def test_a_saved_config_that_builds_no_model_names_the_file_and_field(tmp_path, edit, words):
    """timm's local-dir: loader hands config.json's fields to the model: a bad one names the file ('>=' not supported,
    or a message without the file, before)."""
    save_for_hf(timm.create_model('odevit_tiny_cifar', steps=2), tmp_path)
    config = json.loads((tmp_path / 'config.json').read_text())
    edit(config)
    (tmp_path / 'config.json').write_text(json.dumps(config))
    with pytest.raises(ValueError, match=words.format(config=tmp_path / 'config.json')):
        timm.create_model(f'local-dir:{tmp_path}', pretrained=True)


def test_weights_of_another_architecture_in_a_pretrained_cfg_overlay_are_named():
    """A bViT's released file given to an ODE-ViT: its config.json's model args went to the ODE-ViT ('unexpected
    keyword argument stages')."""
    from timm_odevit.models._cfgs import packaged_weights
    file = packaged_weights('bvit_tiny_cifar.c10')
    if not file.is_file():
        pytest.skip('the packaged bViT weights are not installed')
    with pytest.raises(ValueError, match=rf"{file.with_name('config.json')} says its weights are of 'bvit_tiny_cifar', "
                                         r"not of 'odevit_tiny_cifar': create 'bvit_tiny_cifar' with them"):
        timm.create_model('odevit_tiny_cifar', pretrained=True, pretrained_cfg_overlay=dict(file=str(file)))


@pytest.mark.parametrize('value', [math.inf, math.nan, 0, -1])
def test_depth_scale_must_be_finite_and_positive(value):
    with pytest.raises(ValueError, match='depth_scale must be a finite number > 0'):
        timm.create_model('odevit_tiny_cifar', depth_scale=value)


@pytest.mark.parametrize('name', MODELS)
def test_reset_classifier_and_set_input_size_are_checked(name):
    model = timm.create_model(name)
    with pytest.raises(ValueError, match='num_classes must be an integer >= 0'):
        model.reset_classifier(-1)
    with pytest.raises(ValueError, match=r'not divisible by patch_size \(4, 4\)'):
        model.set_input_size(30)
    model.reset_classifier(0)  # 0 = features only: allowed
    assert model(torch.randn(1, 3, 32, 32)).shape == (1, model.num_features)


def test_bvit_recurrent_regime_refuses_the_naive_field():
    with pytest.raises(ValueError, match="field='naive' applies to regime='ode'"):
        timm.create_model('bvit_tiny_cifar', regime='recurrent', field='naive')
    timm.create_model('bvit_tiny_cifar', regime='recurrent', field='state_subtracted')  # the recurrence itself


def test_bvit_set_iterations_keeps_the_step_length_or_refuses():
    model = timm.create_model('bvit_tiny_cifar', regime='ode', solver='rk4', iterations=8, steps=2)  # h = 4
    with pytest.raises(ValueError, match='not a whole number of steps of the current h=4'):
        model.set_iterations(10)
    model.set_iterations(16)
    assert (model.blocks.solver.steps, model.blocks.solver.h) == (4, 4.0)


@pytest.mark.parametrize('weights', [(math.nan, 1.), (math.inf, 1.), (-1., 1.), (0., 0.)])
def test_bvit_stage_weights_must_be_finite(weights):
    with pytest.raises(ValueError, match='finite non-negative numbers with a positive sum'):
        timm.create_model('bvit_tiny_cifar', stages=(6, 12), stage_weights=weights)


# ---- non-finite results name their cause ------------------------------------------------------------
@pytest.mark.parametrize('name', MODELS)
def test_nan_input_is_blamed_on_the_input(name):
    model = timm.create_model(name).eval()
    with pytest.raises(FloatingPointError, match='the input images hold NaN/Inf') as err:
        model(X * float('nan'))
    assert 'dynamics are not the cause' in str(err.value)


def test_non_finite_weights_are_named():
    model = timm.create_model('odevit_tiny_cifar').eval()
    with torch.no_grad():
        model.blocks[0].field.mlp.fc1.weight[0, 0] = float('nan')
    with pytest.raises(FloatingPointError, match=r"field's weights hold NaN/Inf \(mlp.fc1.weight\)"):
        model(X)
    model = timm.create_model('odevit_tiny_cifar').eval()
    with torch.no_grad():
        model.patch_embed.proj.weight[0, 0, 0, 0] = float('inf')
    with pytest.raises(FloatingPointError, match=r"model's weights hold NaN/Inf \(patch_embed.proj.weight\)"):
        model(X)


def test_float16_overflow_is_named():
    model = timm.create_model('odevit_tiny_cifar', depth_scale=100).eval()
    with pytest.raises(FloatingPointError, match='in float16 .* use bfloat16'):
        with torch.autocast('cpu', dtype=torch.float16):
            model(X * 100)
    assert torch.isfinite(model(X * 100)).all()  # float32 holds the same state


def test_dynamics_blow_up_is_still_the_dynamics():
    model = timm.create_model('odevit_tiny_cifar', depth_scale=1e30, steps=2).eval()
    with pytest.raises(FloatingPointError, match='dynamics blew up'):
        model(X)


@pytest.mark.parametrize('name', MODELS)
def test_logits_that_overflow_from_a_finite_state_raise(name):
    model = timm.create_model(name).eval()
    with torch.no_grad():
        model.head.weight.fill_(3e38)  # finite, but its products overflow
    with pytest.raises(FloatingPointError, match='the final state is finite .* but the logits are not'):
        model(X)
    if name.startswith('odevit'):  # the opt-out hands the logits back
        model.set_solver(check_finite=False)
        assert not torch.isfinite(model(X)).all()


def test_stop_early_intermediates_are_checked():
    model = timm.create_model('odevit_tiny_cifar', depth_scale=1e30, steps=4).eval()
    with pytest.raises(FloatingPointError):
        model.forward_intermediates(X, indices=1, stop_early=True, intermediates_only=True)


# ---- weights -------------------------------------------------------------------------------------------
@pytest.fixture(scope='module')
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp('weights') / 'good'
    save_for_hf(timm.create_model('odevit_tiny_cifar', steps=2), folder, safe_serialization=True)
    return folder


def _variant(saved, tmp_path, mutate_state=None, config_text=None):
    folder = tmp_path / 'variant'
    shutil.copytree(saved, folder)
    if mutate_state:
        state = load_file(folder / 'model.safetensors')
        mutate_state(state)
        save_file(state, folder / 'model.safetensors')
    if config_text is not None:
        (folder / 'config.json').write_text(config_text)
    return folder


def _nan_head(state):
    state['head.weight'][0, 0] = float('nan')


def _int_pos_embed(state):
    state['pos_embed'] = state['pos_embed'].long()


@pytest.mark.parametrize('mutate,words', [(_nan_head, r'NaN/Inf in 1 tensors \(\[.head.weight.\]\)'),
                                          (_int_pos_embed, 'integer tensors for floating-point parameters')])
def test_corrupted_weight_values_are_refused_on_load(saved, tmp_path, mutate, words):
    folder = _variant(saved, tmp_path, mutate)
    with pytest.raises(ValueError, match=words) as err:
        timm.create_model(f'local-dir:{folder}', pretrained=True)
    assert str(folder) in str(err.value)


def test_truncated_weights_name_the_file_on_every_load_path(saved, tmp_path):
    folder = _variant(saved, tmp_path)
    weights = folder / 'model.safetensors'
    weights.write_bytes(weights.read_bytes()[:1000])
    for load in (lambda: timm.create_model(f'local-dir:{folder}', pretrained=True),
                 lambda: timm.create_model('odevit_tiny_cifar', steps=2, pretrained=True,
                                           pretrained_cfg_overlay=dict(file=str(weights)))):
        with pytest.raises(ValueError, match='could not load the pretrained weights of odevit_tiny_cifar from') as err:
            load()
        assert str(folder) in str(err.value) and 'SafetensorError' in str(err.value)


def test_a_checkpoint_of_something_else_names_the_file(tmp_path):
    junk = tmp_path / 'junk.pth'
    torch.save({'x': torch.ones(1)}, junk)
    with pytest.raises(ValueError, match=f'from {junk}.*missing keys'):
        timm.create_model('odevit_tiny_cifar', pretrained=True, pretrained_cfg_overlay=dict(file=str(junk)))


@pytest.mark.parametrize('text,words,timm_error', [('{bad', 'JSONDecodeError', json.JSONDecodeError),
                                                    ('{"num_classes": 10}', '"architecture" must be a JSON str',
                                                     KeyError)])
def test_malformed_config_names_the_file(saved, tmp_path, text, words, timm_error):
    """timm's local-dir: loader keeps its own error (the package does not patch timm); the package's
    own checks (_checks.read_config, used by verify_folder and the CLIs) name the file."""
    from timm_odevit._checks import read_config
    folder = _variant(saved, tmp_path, config_text=text)
    with pytest.raises(timm_error):
        timm.create_model(f'local-dir:{folder}', pretrained=True)
    with pytest.raises(ValueError, match='cannot read|is not a valid timm config.json') as err:
        read_config(folder)
    assert str(folder / 'config.json') in str(err.value) and words in str(err.value)


def test_construction_errors_are_not_blamed_on_the_weights(saved):
    with pytest.raises(ValueError, match='mlp_ratio') as err:
        timm.create_model(f'local-dir:{saved}', pretrained=True, mlp_ratio=0)
    assert 'pretrained weights' not in str(err.value)


def test_released_bvit_fine_tunes_with_separate_stage_heads():
    model = timm.create_model('bvit_tiny_cifar.c10', pretrained=True, stages=(6, 12), stage_heads='separate')
    assert torch.equal(model.stage_heads[0].weight, model.head.weight)  # stage heads start as the final head
    assert model.stage_heads[0].weight.data_ptr() != model.head.weight.data_ptr()
    plain = timm.create_model('bvit_tiny_cifar.c10', pretrained=True).eval()
    assert torch.allclose(model.eval()(X), plain(X))


def test_a_grey_model_normalizes_one_channel():
    """in_chans=1: timm's transform must produce one normalized channel (mean / std averaged over R, G, B)."""
    from PIL import Image
    from timm.data import create_transform, resolve_data_config
    model = timm.create_model('odevit_tiny_cifar.c10', pretrained=True, in_chans=1).eval()
    config = resolve_data_config(model=model)
    rgb = timm.create_model('odevit_tiny_cifar').pretrained_cfg
    assert config['mean'] == pytest.approx((sum(rgb['mean']) / 3,)) and config['std'] == pytest.approx((sum(rgb['std']) / 3,))
    image = create_transform(**config)(Image.new('L', (32, 32), 128))
    assert image.shape == (1, 32, 32) and model(image[None]).shape == (1, 10)


@pytest.mark.parametrize('name,gp', [('bvit_tiny_cifar.c10', 'avg'), ('odevit_tiny_cifar.c10', 'map')])
def test_fine_tuning_with_another_global_pool(name, gp, caplog):
    """As timm's ViT: with a new classifier the new pooling head starts fresh (warned) and the rest loads; with the
    weights' classifier kept, the error names global_pool, not the weights."""
    model = timm.create_model(name, pretrained=True, num_classes=100, global_pool=gp)
    plain = timm.create_model(name, pretrained=True)
    for key, value in plain.blocks.field.state_dict().items():
        assert torch.equal(model.blocks.field.state_dict()[key], value), key
    assert f"global_pool='{gp}' differs from the pretrained weights' ('token'): " in caplog.text
    assert '[]' not in caplog.text  # names the weights that start fresh or are dropped, never an empty list
    assert model.eval()(X).shape == (X.shape[0], 100)
    with pytest.raises(ValueError, match=f"trained with global_pool='token', not '{gp}'"):
        timm.create_model(name, pretrained=True, global_pool=gp)


@pytest.mark.parametrize('name,kwargs', [('odevit_tiny_cifar', {'img_size': 48}), ('bvit_tiny_cifar', {'in_chans': 1}),
                                         ('odevit_tiny_cifar', {'in_chans': 4}),
                                         ('vit_odeified', {'base': 'vit_tiny_patch16_224', 'depth': 2, 'img_size': 32,
                                                           'patch_size': 4})])
def test_data_config_is_the_size_the_model_was_built_for(name, kwargs):
    """train.py resolves its preprocessing from the pretrained cfg: it must describe this model."""
    from timm.data import resolve_data_config
    model = timm.create_model(name, **kwargs)
    size = (kwargs.get('in_chans', 3), *(2 * (kwargs.get('img_size', 32),)))
    config = resolve_data_config(model=model)
    assert config['input_size'] == size and len(config['mean']) == len(config['std']) == size[0]
    assert timm.create_model('odevit_tiny_cifar').pretrained_cfg['input_size'] == (3, 32, 32)  # defaults untouched
