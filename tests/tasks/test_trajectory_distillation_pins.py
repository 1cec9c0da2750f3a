"""Pins of the trajectory-distillation loss and set-up that a plausible bug would break: the loss weights,
the JaSMin window, a teacher checkpoint rebuilt with its own args, the loader's normalisation, compile()."""
import argparse

import pytest
import timm
import torch
import torch.nn.functional as F

import timm_odevit  # noqa: F401
from timm_odevit.tasks import TrajectoryDistillationTask
from timm_odevit.tasks.attention_losses import jasmin_loss
from timm_odevit.layers import depth_stack


def _teacher(**kwargs):
    torch.manual_seed(0)
    return timm.create_model('vit_tiny_patch16_224', num_classes=10, depth=4, **kwargs)


def _batch(n=4):
    torch.manual_seed(1)
    return torch.randn(n, 3, 32, 32), torch.arange(n) % 10


@pytest.mark.parametrize('distill_w,task_w', [(0.3, 0.5), (2.0, 1.0), (0.0, 1.0)])
def test_loss_is_the_weighted_sum_of_its_terms(distill_w, task_w):
    x, y = _batch()
    student = timm.create_model('odevit_tiny_cifar', steps=4)
    task = TrajectoryDistillationTask(student, _teacher(), criterion=torch.nn.CrossEntropyLoss(),
                                      distill_loss_weight=distill_w, task_loss_weight=task_w)
    out = task(x, y)
    assert out['kd_loss'] > 0 and out['task_loss'] > 0
    torch.testing.assert_close(out['loss'], task_w * out['task_loss'] + distill_w * out['kd_loss'])


def test_jasmin_window_is_the_last_85_percent_including_its_first_point():
    x, y = _batch()
    student = timm.create_model('odevit_tiny_cifar', steps=20)
    task = TrajectoryDistillationTask(student, _teacher(), criterion=torch.nn.CrossEntropyLoss(), jasmin_weight=0.5,
                                      distill_loss_weight=0., task_loss_weight=0.)
    task.trainable_module.indices = [1, 2, 9, 19]  # times 0.10, 0.15 (the window's first point), 0.50, 1.00
    out = task(x, y)
    _, taps = student.forward_intermediates(x, indices=[2, 9, 19], output_fmt='NLC', return_prefix_tokens=True)
    field = depth_stack(student).field
    expected = torch.stack([jasmin_loss(field.attention_probs(torch.cat([prefix, patches], 1)), task.jasmin_k)
                            for patches, prefix in taps]).mean()
    torch.testing.assert_close(out['jasmin_loss'], expected)
    torch.testing.assert_close(out['loss'], 0.5 * expected)


def _train_checkpoint(path, ema=False, **model_kwargs):
    torch.manual_seed(0)
    teacher = timm.create_model('vit_tiny_patch16_224', num_classes=10, **model_kwargs)
    args = argparse.Namespace(model='vit_tiny_patch16_224', model_kwargs=model_kwargs, model_ema=ema)
    ckpt = {'arch': 'vit_tiny_patch16_224', 'args': args, 'epoch': 3, 'state_dict': teacher.state_dict()}
    if ema:
        ckpt['state_dict_ema'] = {k: v * 0.5 for k, v in teacher.state_dict().items()}
    torch.save(ckpt, path)
    return teacher


def test_teacher_checkpoint_is_rebuilt_with_its_own_args(tmp_path):
    """A 32 px teacher trained with --model-kwargs img_size=32 patch_size=4 depth=2 (train.py checkpoint)."""
    teacher = _train_checkpoint(tmp_path / 'teacher.pth.tar', ema=True, img_size=32, patch_size=4, depth=2)
    student = timm.create_model('odevit_tiny_cifar', steps=4)
    task = TrajectoryDistillationTask(student, 'vit_tiny_patch16_224', teacher_checkpoint=str(tmp_path / 'teacher.pth.tar'),
                                      criterion=torch.nn.CrossEntropyLoss())
    built = task.teacher.model
    assert built.patch_embed.img_size == (32, 32) and len(built.blocks) == 2 and task.teacher.input_size == (32, 32)
    torch.testing.assert_close(built.head.weight, 0.5 * teacher.head.weight)  # the weights the run selected on: EMA
    task(*_batch())
    with pytest.raises(ValueError, match="of architecture 'vit_tiny_patch16_224', not 'deit_tiny"):
        TrajectoryDistillationTask(student, 'deit_tiny_patch16_224', teacher_checkpoint=str(tmp_path / 'teacher.pth.tar'))
    # --kd-model-kwargs override the checkpoint's own: a depth that does not fit is refused naming the kwargs
    with pytest.raises(ValueError, match=r"built with .*'depth': 3.*does not match"):
        TrajectoryDistillationTask(student, 'vit_tiny_patch16_224', teacher_checkpoint=str(tmp_path / 'teacher.pth.tar'),
                                   teacher_model_kwargs={'depth': 3})


def test_crafted_teacher_checkpoint_is_refused(tmp_path):
    import os

    class Evil:
        def __reduce__(self):
            return os.system, (f'touch {tmp_path / "ran"}',)
    torch.save({'state_dict': {}, 'args': Evil()}, tmp_path / 'teacher.pth.tar')
    with pytest.raises(ValueError, match='refused'):
        TrajectoryDistillationTask(timm.create_model('odevit_tiny_cifar', steps=4), 'vit_tiny_patch16_224',
                                   teacher_checkpoint=str(tmp_path / 'teacher.pth.tar'))
    assert not (tmp_path / 'ran').exists()


def test_teacher_input_follows_the_loaders_normalisation():
    x, _ = _batch(2)
    student = timm.create_model('odevit_tiny_cifar', steps=4)
    task = TrajectoryDistillationTask(student, _teacher(), mean=(0.5,), std=(0.25, 0.25, 0.25))
    assert task.student_mean.flatten().tolist() == [0.5] * 3 and task.student_std.flatten().tolist() == [0.25] * 3
    pixels = x * 0.25 + 0.5
    expected = F.interpolate((pixels - task.teacher.mean_kd) / task.teacher.std_kd, size=(224, 224), mode='bicubic',
                             align_corners=False)
    torch.testing.assert_close(task.teacher.prepare(x, task.student_mean, task.student_std), expected)
    with pytest.raises(ValueError, match='std must be 3 finite numbers > 0'):
        TrajectoryDistillationTask(student, _teacher(), std=(0.2, 0.0, 0.2))


def test_compile_compiles_the_student_and_keeps_the_loss():
    x, y = _batch()
    torch.manual_seed(0)
    student = timm.create_model('odevit_tiny_cifar', steps=4)
    task = TrajectoryDistillationTask(student, _teacher(), criterion=torch.nn.CrossEntropyLoss())
    eager = task(x, y)['loss']
    eval_model = task.compile(backend='eager')
    assert eval_model is task.get_eval_model() and eval_model._orig_mod is student
    assert hasattr(task.trainable_module, '_orig_mod')
    torch.testing.assert_close(task(x, y)['loss'], eager)
    assert set(task.get_task_state()) == {'projection', 'indices', 'teacher_blocks', 'distances', 'epochs_started'}


def test_wrapper_refuses_trajectory_flags_without_the_trajectory_type():
    from timm_odevit.cli.train import TRAJECTORY_DEFAULTS, check_distillation_args
    args = argparse.Namespace(kd_distill_type='logit', kd_model_name='vit_tiny_patch16_224', **TRAJECTORY_DEFAULTS)
    check_distillation_args(args)
    args.kd_teacher_checkpoint = 'teacher.pth.tar'
    with pytest.raises(SystemExit, match='--kd-teacher-checkpoint applies to --kd-distill-type trajectory'):
        check_distillation_args(args)
    args.kd_distill_type, args.kd_model_name = 'trajectory', None
    with pytest.raises(SystemExit, match='needs --kd-model-name'):
        check_distillation_args(args)
