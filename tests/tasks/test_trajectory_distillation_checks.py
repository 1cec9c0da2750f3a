"""TrajectoryDistillationTask: bad input is refused at construction, pooled teachers are aligned on what
their head reads, and the attention-mass loss reads the teacher's real attention (vit, eva02, beit)."""
import copy
import logging
import math
import re

import pytest
import timm
import torch
import torch.nn.functional as F
from timm.models.vision_transformer import Attention
from timm.utils import AttentionExtract

import timm_odevit  # noqa: F401
from timm_odevit.analysis import depth_stack
from timm_odevit.tasks import TrajectoryDistillationTask, attention_mass_l1, cls_attention_mass

SMALL = dict(pretrained=False, img_size=32, patch_size=8, depth=2, embed_dim=64, num_heads=2, num_classes=10)
TEACHERS = {  # small members of each family, with their own pooling defaults
    'vit': ('vit_tiny_patch16_224', {}),
    'vit_avg': ('vit_tiny_patch16_224', dict(global_pool='avg')),
    'eva02': ('eva02_tiny_patch14_224', {}),  # global_pool='avg', RoPE, [CLS]
    'beit': ('beit_base_patch16_224', {}),  # global_pool='avg', relative position bias, q/v biases, [CLS]
}


def _small(kind, **kwargs):
    torch.manual_seed(0)
    name, kw = TEACHERS[kind]
    return timm.create_model(name, **{**SMALL, **kw, **kwargs})


def _student(**kwargs):
    torch.manual_seed(1)
    return timm.create_model('odevit_tiny_cifar', steps=4, **kwargs)


def _batch():
    g = torch.Generator().manual_seed(0)
    return torch.randn(2, 3, 32, 32, generator=g), torch.randint(0, 10, (2,), generator=g)


# ---- teachers that cannot provide token intermediates ------------------------------------------------
@pytest.mark.parametrize('name', ['resnet18', 'convnext_atto'])
def test_non_vit_teacher_is_refused(name):
    with pytest.raises(TypeError, match=r'cannot provide token intermediates \(no num_prefix_tokens, embed_dim\)'
                                        r'.*vit_\*, deit_\*, eva\*, beit\*'):
        TrajectoryDistillationTask(_student(), timm.create_model(name, device='meta'))


def test_teacher_whose_intermediates_are_not_tokens_is_refused():
    class NCHWViT(timm.models.VisionTransformer):
        def forward_intermediates(self, x, **kwargs):
            return super().forward_intermediates(x, **{**kwargs, 'output_fmt': 'NCHW'})

    torch.manual_seed(0)
    teacher = NCHWViT(img_size=32, patch_size=8, depth=2, embed_dim=64, num_heads=2, num_classes=10)
    with pytest.raises(TypeError, match=r'does not yield 2 \(B, N, 64\) token tensors.*vit_\*, deit_\*'):
        TrajectoryDistillationTask(_student(), teacher)


# ---- scalar arguments ---------------------------------------------------------------------------------
@pytest.mark.parametrize('value', [0., -1., math.nan, math.inf, 'hot'])
def test_bad_mapping_temperature(value):
    with pytest.raises(ValueError, match=rf'mapping temperature must be a finite number > 0.*got {value!r}'):
        TrajectoryDistillationTask(_student(), _small('vit'), mapping='softmax', mapping_temperature=value)


@pytest.mark.parametrize('name', ['distill_loss_weight', 'task_loss_weight', 'attn_mass_weight', 'jasmin_weight'])
@pytest.mark.parametrize('value', [-0.5, math.nan, math.inf, 'x'])
def test_bad_loss_weight(name, value):
    with pytest.raises(ValueError, match=rf'{name} must be a finite number >= 0, got {value!r}'):
        TrajectoryDistillationTask(_student(), _small('vit'), **{name: value})


def test_task_weight_above_one_without_distill_weight():
    with pytest.raises(ValueError, match=r'task_loss_weight=2.0 > 1 makes the default distill_loss_weight.*negative'):
        TrajectoryDistillationTask(_student(), _small('vit'), task_loss_weight=2.)
    task = TrajectoryDistillationTask(_student(), _small('vit'), task_loss_weight=2., distill_loss_weight=1.)
    assert (task.task_loss_weight, task.distill_loss_weight) == (2., 1.)


@pytest.mark.parametrize('k', [0, 1, 2.5, True])
def test_bad_jasmin_k(k):
    with pytest.raises(ValueError, match=rf'jasmin_k must be an integer >= 2.*got {k!r}'):
        TrajectoryDistillationTask(_student(), _small('vit'), jasmin_weight=1., jasmin_k=k)


@pytest.mark.parametrize('epoch', ['x', -1, 1.5, [1]])
def test_bad_ce_start_epoch_is_named(epoch):
    """It is compared with the epoch only in training (--kd-ce-start-epoch x from a config: '>=' not supported)."""
    with pytest.raises(ValueError, match=rf'ce_start_epoch must be an integer >= 0, got {re.escape(repr(epoch))}'):
        TrajectoryDistillationTask(_student(), _small('vit'), ce_start_epoch=epoch)


def test_a_local_dir_teacher_whose_config_json_builds_no_model_is_named(tmp_path):
    (tmp_path / 'config.json').write_text('{"num_classes": 10}')
    words = rf'{tmp_path / "config.json"} is not a valid timm config.json \("architecture"'
    with pytest.raises(ValueError, match=words):
        TrajectoryDistillationTask(_student(), f'local-dir:{tmp_path}')


def test_jasmin_k_above_the_token_count():
    """jasmin_loss names it at the first step: the student has 64 patch + 11 prefix tokens."""
    task = TrajectoryDistillationTask(_student(), _small('vit'), jasmin_weight=1., jasmin_k=500)
    with pytest.raises(ValueError, match=r'JaSMin k must be in 2\.\.75 \(the number of tokens\), got 500'):
        task(*_batch())


def test_unknown_mapping_and_tokens_name_the_value_and_the_choices():
    with pytest.raises(ValueError, match=r"Unknown mapping 'cosine'; choose one of \('uniform', 'arclength', 'softmax'\)"):
        TrajectoryDistillationTask(_student(), _small('vit'), mapping='cosine')
    with pytest.raises(ValueError, match=r"Unknown tokens 'patches'; choose one of \('cls', 'all'\)"):
        TrajectoryDistillationTask(_student(), _small('vit'), tokens='patches')


# ---- what is aligned: the teacher's pooled representation -------------------------------------------------
@pytest.mark.parametrize('kind', ['vit_avg', 'eva02', 'beit'])
def test_avg_pooled_teacher_with_cls_is_aligned_on_its_mean_patch_token(kind, caplog):
    teacher, student = _small(kind), _student()
    assert teacher.global_pool == 'avg' and teacher.cls_token is not None
    with caplog.at_level(logging.INFO, logger='timm_odevit.tasks.trajectory_distillation'):
        task = TrajectoryDistillationTask(student, teacher, criterion=torch.nn.CrossEntropyLoss())
    assert task.teacher.pool == 'avg'
    assert "aligning the teacher's avg-pooled patch tokens (global_pool='avg') with the student's avg-pooled" \
        in caplog.text
    x, y = _batch()
    out = task(x, y)
    with torch.no_grad():
        h = teacher.forward_intermediates(task.teacher.prepare(x, task.student_mean, task.student_std),
                                          output_fmt='NLC', return_prefix_tokens=True, intermediates_only=True)
    targets = [task.teacher.pooled(torch.cat([p, s], 1), teacher.num_prefix_tokens) for s, p in h]
    for (s, p), target in zip(h, targets):
        torch.testing.assert_close(target, s.mean(1))  # the mean of the patch tokens, as the teacher's head pools
        assert not torch.allclose(target, p[:, 0])  # not its [CLS]
    _, states = student.forward_intermediates(x, indices=task.trainable_module.indices, output_fmt='NLC',
                                              return_prefix_tokens=True)
    proj = task.trainable_module.projection
    expected = torch.stack([F.mse_loss(proj(s).mean(1), t) for (s, _), t in zip(states, targets)]).mean()
    torch.testing.assert_close(out['kd_loss'], expected, rtol=1e-4, atol=1e-6)


def test_cls_pooled_teacher_needs_a_student_cls():
    student = _student(class_token=False, global_pool='avg')  # registers only: prefix[0] would be a register
    with pytest.raises(ValueError, match=r'classifies from its \[CLS\] token but the student has none.*class_token=True'):
        TrajectoryDistillationTask(student, _small('vit'))
    task = TrajectoryDistillationTask(student, _small('vit_avg'))  # a mean-pooled teacher is fine
    assert torch.isfinite(task(*_batch())['kd_loss'])


# ---- the teacher's attention -------------------------------------------------------------------------------
@pytest.mark.parametrize('kind', ['vit', 'eva02', 'beit'])
def test_attention_mass_reads_the_teachers_real_attention(kind):
    teacher, student = _small(kind), _student()
    task = TrajectoryDistillationTask(student, teacher, attn_mass_weight=0.5)
    x, y = _batch()
    out = task(x, y)
    assert teacher.blocks[-1].attn.fused_attn  # restored after the teacher forward
    # reference: timm's AttentionExtract (fx graph, softmax node) on a copy without fused attention
    ref = copy.deepcopy(teacher)
    for m in ref.modules():
        if hasattr(m, 'fused_attn'):
            m.fused_attn = False
    with torch.no_grad():
        probs = AttentionExtract(ref, method='fx')(task.teacher.prepare(x, task.student_mean, task.student_std))
    probs = probs['blocks.1.attn.softmax']
    raw = task.trainable_module(x)[2]
    s_mass = cls_attention_mass(depth_stack(student).field.attention_probs(raw[-1]), student.num_prefix_tokens)
    expected = attention_mass_l1(s_mass, cls_attention_mass(probs, teacher.num_prefix_tokens))
    torch.testing.assert_close(out['attn_mass_loss'], expected, rtol=1e-4, atol=1e-6)
    out['loss'].backward()
    assert student.field.attn.qkv.weight.grad is not None


class _AlwaysFused(Attention):
    def forward(self, *args, **kwargs):
        self.fused_attn = True  # never exposes the softmax
        return super().forward(*args, **kwargs)


@pytest.mark.parametrize('attn_layer', ['diff', _AlwaysFused])
def test_teacher_attention_that_cannot_be_extracted_is_refused_at_construction(attn_layer):
    teacher = _small('vit', attn_layer=attn_layer)
    with pytest.raises(TypeError, match=r'cannot extract the attention of teacher VisionTransformer faithfully.*'
                                        r'attn_mass_weight=0'):
        TrajectoryDistillationTask(_student(), teacher, attn_mass_weight=0.5)
    TrajectoryDistillationTask(_student(), teacher)  # without the attention-mass loss it is a fine teacher


def test_attention_mass_needs_blocks_with_attn_drop():
    teacher = _small('vit')
    del teacher.blocks[-1].attn.attn_drop
    with pytest.raises(TypeError, match=r"cannot extract the attention.*AttentionExtract hooks blocks\[-1\]"):
        TrajectoryDistillationTask(_student(), teacher, attn_mass_weight=0.5)
