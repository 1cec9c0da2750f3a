import json
import pathlib
import shutil

import pytest
import timm
import torch

import timm_odevit  # noqa: F401
from timm_odevit import ContinuousDepthStack, odeify
from timm_odevit.models import odeified

FLAVOURS = [
    ('vit_tiny_patch16_224', {}),
    ('deit_tiny_distilled_patch16_224', {}),      # [CLS] + distillation token
    ('vit_tiny_patch16_224', {'reg_tokens': 4}),  # register tokens
]


def _vit(name, **kwargs):
    torch.manual_seed(0)
    return timm.create_model(name, num_classes=10, depth=4, **kwargs).eval()


def _params(m):
    return sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize('name,kwargs', FLAVOURS)
@pytest.mark.parametrize('field', ['state_subtracted', 'odevit'])
def test_flavours_keep_the_timm_api(name, kwargs, field):
    vit = _vit(name, **kwargs)
    ode = odeify(vit, field=field, init='mean').eval()
    x = torch.randn(2, 3, 224, 224)
    assert ode(x).shape == (2, 10) and torch.isfinite(ode(x)).all()
    final, states = ode.forward_intermediates(x)
    assert len(states) == 4 and states[0].shape == (2, 192, 14, 14)
    early = ode.forward_intermediates(x, indices=[1], stop_early=True, intermediates_only=True)
    torch.testing.assert_close(early[0], states[1])
    assert _params(ode) == _params(vit) - _params(vit.blocks) + _params(ode.blocks)  # only the blocks changed
    assert _params(ode.blocks) < 0.3 * _params(vit.blocks)
    assert ode.pretrained_cfg['architecture'] == 'vit_odeified'  # its own model, the base's input settings
    for k in ('input_size', 'fixed_input_size', 'mean', 'std', 'crop_pct', 'num_classes', 'classifier'):
        assert ode.pretrained_cfg[k] == vit.pretrained_cfg[k], k
    assert not any(ode.pretrained_cfg.get(k) for k in ('url', 'hf_hub_id', 'file'))  # the base's weights are not its own


@pytest.mark.parametrize('k', [0, 2, 3])
def test_one_euler_step_h1_is_block_k(k):
    vit = _vit('vit_tiny_patch16_224')
    ode = odeify(vit, field='state_subtracted', init=f'block:{k}', solver=dict(method='euler', steps=1, t_end=1.0))
    z = torch.randn(2, 197, 192)
    torch.testing.assert_close(ode.blocks(z), vit.blocks[k](z))


def test_default_solver_is_the_discrete_depth():
    vit = _vit('vit_tiny_patch16_224')
    ode = odeify(vit, init='block:1')
    assert ode.blocks.solver.steps == 4 and ode.blocks.solver.h == 1.0
    z = torch.randn(1, 197, 192)
    expected = z
    for _ in range(4):
        expected = vit.blocks[1](expected)
    torch.testing.assert_close(ode.blocks(z), expected, rtol=1e-4, atol=1e-5)
    finer = odeify(vit, init='block:1', solver=dict(method='rk4', steps=8))
    assert finer.blocks.solver.t_end == 4.0 and finer.blocks.solver.steps == 8


def test_mean_init_and_original_untouched():
    vit = _vit('vit_tiny_patch16_224')
    before = {k: v.clone() for k, v in vit.state_dict().items()}
    ode = odeify(vit, init='mean')
    mean = torch.stack([b.attn.qkv.weight for b in vit.blocks]).mean(0)
    torch.testing.assert_close(ode.blocks.field.block.attn.qkv.weight, mean)
    with torch.no_grad():
        ode.pos_embed.add_(1.)
        ode.blocks.field.block.attn.qkv.weight.add_(1.)
    assert len(vit.blocks) == 4
    for k, v in vit.state_dict().items():
        torch.testing.assert_close(v, before[k])


def test_the_class_is_the_models_under_the_mixin_and_pickles():
    """odeify's model is an instance of the base's class under ContinuousDepthMixin (that class untouched), which
    owns pruning and the bookkeeping; it pickles and copies as that class."""
    import copy
    import pickle
    from timm.models.vision_transformer import VisionTransformer
    from timm_odevit.models.base import ContinuousDepthMixin
    vit = _vit('vit_tiny_patch16_224')
    ode = odeify(vit)
    assert isinstance(ode, type(vit)) and isinstance(ode, ContinuousDepthMixin)
    assert type(ode).__name__ == 'VisionTransformer'  # the name error messages and repr show
    assert type(vit) is VisionTransformer and 'prune_intermediate_layers' not in vars(ode)
    assert type(odeify(_vit('vit_tiny_patch16_224'))) is type(ode)
    x = torch.randn(1, 3, 224, 224)
    for twin in (pickle.loads(pickle.dumps(ode)), copy.deepcopy(ode)):
        assert type(twin) is type(ode) and twin.blocks is not ode.blocks and twin.blocks[1].stack is twin.blocks
        torch.testing.assert_close(twin(x), ode(x))


def test_parameters_fall_from_l_blocks_to_one():
    vit = timm.create_model('vit_small_patch16_224', num_classes=10)
    ode = odeify(vit, init='random')
    block = sum(p.numel() for p in vit.blocks[0].parameters())
    assert _params(vit) - _params(ode) == 11 * block


def test_set_solver_and_grad_checkpointing():
    ode = odeify(_vit('vit_tiny_patch16_224'), init='mean')
    ode.blocks.set_solver(method='midpoint', steps=2)
    ode.set_grad_checkpointing(True)
    ode.train()
    ode(torch.randn(1, 3, 224, 224)).sum().backward()
    assert ode.blocks.field.block.attn.qkv.weight.grad is not None


def test_bad_input():
    with pytest.raises(TypeError, match='VisionTransformer'):
        odeify(timm.create_model('resnet18'))
    with pytest.raises(ValueError, match='Unknown init'):
        odeify(_vit('vit_tiny_patch16_224'), init='median')
    with pytest.raises(ValueError, match='blocks 0..3'):
        odeify(_vit('vit_tiny_patch16_224'), init='block:9')
    with pytest.raises(ValueError, match='Unknown field'):
        odeify(_vit('vit_tiny_patch16_224'), field='naive')
    with pytest.raises(ValueError, match='already odeified'):
        odeify(odeify(_vit('vit_tiny_patch16_224')))


def test_solver_takes_a_method_name_as_the_models_solver_kwarg_does():
    """odeify(vit, solver='rk4') failed with 'dictionary update sequence element #0 has length 1'."""
    vit = _vit('vit_tiny_patch16_224')
    ode = odeify(vit, solver='rk4')
    assert ode.blocks.solver == odeify(vit, solver={'method': 'rk4'}).blocks.solver
    assert ode.blocks.solver.method == 'rk4' and ode.blocks.solver.t_end == len(vit.blocks)
    with pytest.raises(ValueError, match=r'solver must be a mapping of name: value, got a list'):
        odeify(vit, solver=['rk4', 3])


def test_a_local_dir_base_whose_config_json_builds_nothing_is_named(tmp_path):
    (tmp_path / 'config.json').write_text('{"architecture": "vit_tiny_patch16_224", "model_args": [1]}')
    with pytest.raises(ValueError, match=rf'{tmp_path / "config.json"} is not a valid timm config.json \("model_args"'):
        timm.create_model('vit_odeified', base=f'local-dir:{tmp_path}')


def test_registered_vit_odeified_for_train_py():
    model = timm.create_model('vit_odeified', base='vit_tiny_patch16_224', depth=3, num_classes=10,
                              field='odevit', solver='rk4', steps=6)
    assert isinstance(model.blocks, ContinuousDepthStack) and model.blocks.solver.method == 'rk4'
    assert model(torch.randn(1, 3, 224, 224)).shape == (1, 10)
    assert model.pretrained_cfg['architecture'] == 'vit_odeified' and model._model_args['base'] == 'vit_tiny_patch16_224'
    with pytest.raises(TypeError):
        timm.create_model('vit_odeified', not_an_arg=1)


def test_odevit_field_folds_layer_scale():
    """deit3-style blocks scale attention and MLP outputs by LayerScale gammas: the field keeps them."""
    vit = _vit('vit_tiny_patch16_224', init_values=0.5)
    with torch.no_grad():
        for block in vit.blocks:
            block.ls1.gamma.uniform_(0.1, 2.)
            block.ls2.gamma.uniform_(0.1, 2.)
    field = odeify(vit, field='odevit', init='block:1').blocks.field
    block = vit.blocks[1]
    assert torch.allclose(field.attn.proj.weight, block.ls1.gamma[:, None] * block.attn.proj.weight)
    assert torch.allclose(field.mlp.fc2.weight, block.ls2.gamma[:, None] * block.mlp.fc2.weight)
    assert torch.equal(field.mlp.fc1.weight, block.mlp.fc1.weight)


def test_odevit_field_refuses_blocks_of_another_layout():
    vit = timm.create_model('vit_small_patch16_18x2_224', num_classes=10, depth=2, img_size=32, patch_size=4)
    with pytest.raises(ValueError, match="field='odevit' rebuilds .* ParallelThingsBlock lacks .* field='state_subtracted'"):
        odeify(vit, field='odevit')
    assert odeify(vit, field='state_subtracted')(torch.randn(1, 3, 32, 32)).shape == (1, 10)


SHELL = list(odeified.SHELL)  # the paper's student keeps these parts of its teacher fixed


@pytest.fixture(scope='module')
def hybrid_teacher(tmp_path_factory):
    """A small trained-ViT stand-in saved as the releases are (config.json + model.safetensors): timm's hybrid ViT
    (a ResNet stem before 1x1 patches) with its own normalisation."""
    from timm.models import save_for_hf
    torch.manual_seed(0)
    vit = timm.create_model('vit_tiny_r_s16_p8_224', img_size=32, patch_size=1, depth=3, num_classes=10,
                            pretrained_cfg_overlay=dict(mean=(0.4, 0.5, 0.6), std=(0.2, 0.25, 0.3)))
    folder = tmp_path_factory.mktemp('teacher')
    save_for_hf(vit, folder)
    return vit.eval(), folder


def test_plug_and_play_student_in_a_trained_shell(hybrid_teacher):
    """The paper's student in one call: the trained ViT's shell (loaded from local-dir:), a random ODE-ViT field
    at its width on its depth's grid, the shell frozen; only the field learns."""
    teacher, folder = hybrid_teacher
    student = timm.create_model('vit_odeified', base=f'local-dir:{folder}', pretrained=True, field='odevit',
                                init='random', steps=6, freeze=SHELL)
    for name in ('cls_token', 'pos_embed', 'head.weight', 'norm.weight', 'patch_embed.backbone.conv.weight'):
        assert torch.equal(student.get_parameter(name), teacher.get_parameter(name)), name
    cfg = student.pretrained_cfg  # the teacher's data settings, its image channels (not its stem's 64)
    assert tuple(cfg['input_size']) == (3, 32, 32) and tuple(cfg['mean']) == (0.4, 0.5, 0.6)
    assert tuple(cfg['std']) == (0.2, 0.25, 0.3)
    assert student.blocks.solver.steps == 6 and student.blocks.field.depth_scale == 3.
    trainable = {n for n, p in student.named_parameters() if p.requires_grad}
    assert trainable == {f'blocks.0.field.{n}' for n, _ in student.blocks.field.named_parameters()}
    student.train()
    student(torch.randn(2, 3, 32, 32)).sum().backward()
    assert all(p.grad is None for n, p in student.named_parameters() if n not in trainable)
    assert all(student.get_parameter(n).grad is not None for n in trainable)
    assert student._model_args['freeze'] == SHELL


def test_plug_and_play_student_round_trip(hybrid_teacher, tmp_path):
    """A trained student saved as timm saves it reloads with its weights and its frozen shell, without the teacher's
    folder: its model args name the teacher's architecture (and its args), not where the teacher's weights were."""
    from timm.models import save_for_hf
    teacher = tmp_path / 'teacher'
    shutil.copytree(hybrid_teacher[1], teacher)
    student = timm.create_model('vit_odeified', base=f'local-dir:{teacher}', pretrained=True, field='odevit',
                                init='random', steps=6, freeze=SHELL).eval()
    save_for_hf(student, tmp_path / 'student')
    shutil.rmtree(teacher)
    saved = json.loads((tmp_path / 'student' / 'config.json').read_text())['model_args']
    assert (saved['base'], saved['depth'], saved['img_size']) == ('vit_tiny_r_s16_p8_224', 3, [32, 32])
    again = timm.create_model(f'local-dir:{tmp_path / "student"}', pretrained=True).eval()
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(again(x), student(x))
    assert not again.head.weight.requires_grad and again.blocks.field.attn.qkv.weight.requires_grad


def test_the_registered_convstem_student_is_the_plug_and_play_studys():
    """odevit_tiny_convstem_cifar is the study's shell student by name (bench/plug_and_play.py, a vit_odeified in
    release/teacher_convstem_cifar10_cycle6's shell): the same parameters, so a study checkpoint starts its cycles,
    and the same function of them; every part trains unless the recipe freezes the shell."""
    teacher = pathlib.Path(__file__).resolve().parents[1] / 'release' / 'teacher_convstem_cifar10_cycle6'
    study = timm.create_model('vit_odeified', base=f'local-dir:{teacher}', field='odevit', init='random', steps=6,
                              freeze=SHELL).eval()
    named = timm.create_model('odevit_tiny_convstem_cifar').eval()
    assert all(p.requires_grad for p in named.parameters())
    named.load_state_dict(study.state_dict())  # strict: the same names and shapes
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(named(x), study(x), rtol=0, atol=0)
    frozen = timm.create_model('odevit_tiny_convstem_cifar', freeze=SHELL)
    trainable = [n for n, p in frozen.named_parameters() if p.requires_grad]
    assert trainable == [n for n, p in study.named_parameters() if p.requires_grad] and trainable
    for key in ('input_size', 'mean', 'std'):
        assert list(named.pretrained_cfg[key]) == list(study.pretrained_cfg[key]), key
    assert named.pretrained_cfg['architecture'] == 'odevit_tiny_convstem_cifar' and named.num_classes == 10
    assert named.blocks.solver.steps == 6  # odeify's default for the teacher's 6 blocks: other grids as kwargs
    assert timm.create_model('odevit_tiny_convstem_cifar', step_size=0.5).blocks.solver.steps == 2
    no_weights = dict(file=None, hf_hub_id=None)  # without its release: refused, not timm's ImageNet shell, silently
    with pytest.raises(ValueError, match=r"odevit_tiny_convstem_cifar has no released weights .* vit_odeified\(base="):
        timm.create_model('odevit_tiny_convstem_cifar', pretrained=True, pretrained_cfg_overlay=no_weights)


def test_hybrid_vit_reads_three_channel_images():
    """A hybrid ViT's patch projection reads its stem's 64 channels; the data config is the image's 3."""
    model = timm.create_model('vit_odeified', base='vit_tiny_r_s16_p8_224', img_size=32, patch_size=1, depth=2,
                              num_classes=10)
    assert tuple(model.pretrained_cfg['input_size']) == (3, 32, 32) and len(model.pretrained_cfg['mean']) == 3


def test_freeze_refuses_what_is_not_in_the_shell():
    vit = _vit('vit_tiny_patch16_224')
    with pytest.raises(ValueError, match=r"freeze \['blocks', 'heads'\]: not a part of the kept shell"):
        odeify(vit, freeze=['blocks', 'heads'])
    with pytest.raises(ValueError, match=r"freeze \['h', 'e', 'a', 'd'\]: not a part of the kept shell"):
        odeify(vit, freeze='head')  # a string is a sequence of one-letter names
    frozen = odeify(vit, freeze=['head', 'pos_embed'])
    assert not frozen.head.weight.requires_grad and not frozen.pos_embed.requires_grad
    assert vit.head.weight.requires_grad and vit.pos_embed.requires_grad  # the original is untouched
