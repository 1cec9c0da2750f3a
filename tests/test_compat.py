"""timm_odevit._compat: each private interface of torch, timm, torchdiffeq and argparse the package relies on still
exists upstream and still means what the package takes it to mean."""
import argparse
import ast
import types

import pytest
import timm
import torch
import torch.nn.functional as F
import torchdiffeq
from torch import nn
from torch.nn.modules import module as torch_module
from torch.utils import flop_counter
from timm.models.vision_transformer import VisionTransformer

from timm_odevit import _compat


# ---- torch ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize('register', [
    'register_forward_hook',
    'register_forward_pre_hook',
    'register_full_backward_hook',
    'register_full_backward_pre_hook',
])
def test_module_hooks_are_seen(register):
    module = nn.Linear(2, 2)
    assert not _compat.has_module_hooks(module)
    handle = getattr(module, register)(lambda *args: None)
    assert _compat.has_module_hooks(module)
    handle.remove()
    assert not _compat.has_module_hooks(module)


@pytest.mark.parametrize('register', [
    'register_module_forward_hook',
    'register_module_forward_pre_hook',
    'register_module_full_backward_hook',
    'register_module_full_backward_pre_hook',
])
def test_global_module_hooks_are_seen(register):
    assert not _compat.has_global_module_hooks()
    handle = getattr(torch_module, register)(lambda *args: None)
    try:
        assert _compat.has_global_module_hooks()
    finally:
        handle.remove()
    assert not _compat.has_global_module_hooks()


def test_cpu_attention_runs_the_named_kernel():  # tools/card_extras.py's gmacs counts it
    from tools.card_extras import cpu_flash_attention_op
    kernel = cpu_flash_attention_op()
    assert kernel is not None
    calls = []
    q = torch.randn(1, 2, 4, 8)
    with flop_counter.FlopCounterMode(display=False, custom_mapping={kernel: lambda *a, **k: calls.append(1) or 1}):
        F.scaled_dot_product_attention(q, q, q)
    assert calls


# ---- torchdiffeq ---------------------------------------------------------------------------------------------
def test_a_failed_adaptive_solve_raises_one_of_the_named_errors():
    with pytest.raises(_compat.ODE_SOLVE_FAILURES, match='underflow in dt'):
        torchdiffeq.odeint(lambda t, x: x * float('nan'), torch.ones(2), torch.tensor([0., 1.]), method='dopri5')


# ---- timm ----------------------------------------------------------------------------------------------------
def test_create_model_records_its_kwargs_where_they_are_read():
    vit = timm.create_model('vit_tiny_patch16_224', img_size=32, depth=2)
    assert _compat.recorded_model_args(vit)['depth'] == 2
    assert _compat.recorded_model_args(nn.Linear(2, 2)) == {}
    model = timm.create_model('odevit_tiny_cifar', steps=3)  # a TimmModelArgs model: create_model records through it
    assert model.recorded_args['steps'] == 3
    model.set_solver(method='rk4')
    assert timm.models.get_model_args(model)['solver'] == 'rk4'  # ... and get_model_args reads through it


def test_a_features_only_release_keeps_its_saved_args():
    """Weights with saved model args (the packaged releases) built features_only: timm's wrapper has no
    record_model_args of its own; the record is replaced on the wrapper, where timm reads it."""
    features = timm.create_model('odevit_tiny_cifar.c10', pretrained=True, features_only=True)
    assert type(features).__name__ == 'FeatureGetterNet'
    assert timm.models.get_model_args(features)['steps'] == 6 and features._model_args['features_only']
    _compat.set_recorded_model_args(features, {'steps': 3})
    assert _compat.recorded_model_args(features) == {'steps': 3}


class _PositionsSeen(_compat.TimmPosEmbed, VisionTransformer):
    seen = 0

    def embed_positions(self, x):
        self.seen += 1
        return VisionTransformer._pos_embed(self, x)


def test_forward_features_embeds_positions_where_the_mixin_hooks_in():
    kwargs = dict(img_size=32, patch_size=8, embed_dim=16, depth=1, num_heads=2, num_classes=0)
    model = _PositionsSeen(**kwargs)
    x = torch.randn(2, 3, 32, 32)
    model.forward_features(x)
    assert model.seen == 1
    tokens = _compat.vit_pos_embed(VisionTransformer(**kwargs), VisionTransformer(**kwargs).patch_embed(x))
    assert tokens.shape == (2, 1 + 16, 16)


def test_train_py_parse_args_is_replaced_and_returned():
    module = types.SimpleNamespace(_parse_args=lambda: ('args', 'text'))
    original = module._parse_args
    assert _compat.replace_train_parse_args(module, print) is original and module._parse_args is print


def test_timm_train_py_parses_its_command_line_with_the_named_function():
    from timm_odevit.cli.scripts import locate_script
    try:
        path = locate_script('train.py', download=False)
    except FileNotFoundError:
        pytest.skip("timm's train.py is not found here without a download")
    tree = ast.parse(path.read_text())
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert '_parse_args' in functions
    calls = [n.func.id for n in ast.walk(functions['main']) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    assert '_parse_args' in calls


# ---- argparse ------------------------------------------------------------------------------------------------
def test_parser_actions_hold_every_argument_of_the_parser_and_its_groups():
    parser = argparse.ArgumentParser()
    flag = parser.add_argument('--flag')
    grouped = parser.add_argument_group('group').add_argument('--grouped')
    actions = _compat.parser_actions(parser)
    assert flag in actions and grouped in actions
    assert {a.dest for a in actions} >= {'help', 'flag', 'grouped'}
