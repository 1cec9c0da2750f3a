import pathlib
import shutil

import pytest
import timm
import torch
import torch.nn.functional as F

import timm_odevit  # noqa: F401
from timm_odevit.tasks import TrajectoryDistillationTask, align_time_points, load_teacher

CIFAR = pathlib.Path(__file__).resolve().parents[2].parent / 'shared' / 'data' / 'cifar10'


def _teacher(**kwargs):
    torch.manual_seed(0)
    return timm.create_model('vit_tiny_patch16_224', num_classes=10, depth=4, **kwargs)


def _real_batch(tmp_path, n=16):
    """Real CIFAR-10 images copied into a temp dir, normalised for the student."""
    import numpy as np
    from PIL import Image
    xs, ys = [], []
    classes = sorted(p.name for p in (CIFAR / 'train').iterdir())
    for label, c in enumerate(classes):
        for f in sorted((CIFAR / 'train' / c).iterdir())[: n // 10 + 1]:
            dst = tmp_path / c / f.name
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(f, dst)
            xs.append(np.asarray(Image.open(dst).convert('RGB')))
            ys.append(label)
    x = torch.from_numpy(np.stack(xs[:n])).permute(0, 3, 1, 2).float() / 255.
    mean = torch.tensor((0.4914, 0.4822, 0.4465)).view(1, 3, 1, 1)
    std = torch.tensor((0.2470, 0.2435, 0.2616)).view(1, 3, 1, 1)
    return (x - mean) / std, torch.tensor(ys[:n])


@pytest.fixture
def real_batch(tmp_path):
    if not CIFAR.is_dir():
        pytest.skip(f'CIFAR-10 ImageFolder not found at {CIFAR}')
    return _real_batch(tmp_path)


def test_kd_loss_is_the_mse_of_mapped_cls_states(real_batch):
    x, y = real_batch
    teacher = _teacher()
    student = timm.create_model('odevit_tiny_cifar', steps=8)
    task = TrajectoryDistillationTask(student, teacher, criterion=torch.nn.CrossEntropyLoss())
    assert task.trainable_module.indices == [1, 3, 5, 7]
    out = task(x, y)
    # recompute by hand: teacher at its own 224 px input and normalisation, student states at t_2, t_4, …
    x_t = F.interpolate(x * task.student_std + task.student_mean, size=(224, 224), mode='bicubic', align_corners=False)
    x_t = (x_t - task.teacher.mean_kd) / task.teacher.std_kd
    with torch.no_grad():
        h = teacher.forward_intermediates(x_t, output_fmt='NLC', return_prefix_tokens=True, intermediates_only=True)
    proj = task.trainable_module.projection
    _, states = student.forward_intermediates(x, indices=[1, 3, 5, 7], output_fmt='NLC', return_prefix_tokens=True)
    expected = torch.stack([F.mse_loss(proj(p[:, 0]), t[1][:, 0]) for (_, p), t in zip(states, h)]).mean()
    torch.testing.assert_close(out['kd_loss'], expected, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(out['loss'], out['task_loss'] + out['kd_loss'])


def test_a_few_steps_lower_the_loss(real_batch):
    x, y = real_batch
    torch.manual_seed(0)
    student = timm.create_model('odevit_tiny_cifar', steps=4)
    task = TrajectoryDistillationTask(student, _teacher(), mapping='arclength', tokens='all',
                                      criterion=torch.nn.CrossEntropyLoss())
    params = [p for p in task.trainable_module.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3)
    losses = []
    for _ in range(20):
        out = task(x, y)
        opt.zero_grad()
        out['loss'].backward()
        opt.step()
        losses.append(out['loss'].item())
    assert losses[-1] < 0.7 * losses[0]
    assert all(p.grad is not None for p in params)
    assert not any(p.requires_grad for p in task.teacher.parameters())


def test_checkpoint_state_roundtrip_and_student_only_export():
    student = timm.create_model('odevit_tiny_cifar', steps=6)
    task = TrajectoryDistillationTask(student, _teacher(), mapping='softmax')
    task.calibrate(torch.randn(2, 3, 32, 32))
    state = task.get_checkpoint_state()
    assert set(state['state_dict']) == set(student.state_dict())  # the exported model is the student only
    assert set(state['task_state']) == {'projection', 'indices', 'teacher_blocks', 'distances', 'epochs_started'}
    other = TrajectoryDistillationTask(timm.create_model('odevit_tiny_cifar', steps=6), _teacher())
    other.load_checkpoint_state(state['state_dict'], state['task_state'])
    assert other.trainable_module.indices == task.trainable_module.indices and len(task.trainable_module.distances) == 4
    assert other.trainable_module.distances == task.trainable_module.distances  # drawn grids align as before
    torch.testing.assert_close(other.trainable_module.projection.weight, task.trainable_module.projection.weight)


def test_teacher_flavours_and_gap_teacher():
    x, y = torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,))
    for teacher in (
            timm.create_model('deit_tiny_distilled_patch16_224', num_classes=10, depth=3),   # [CLS] + dist token
            timm.create_model('vit_tiny_patch16_224', num_classes=10, depth=3, reg_tokens=4),  # registers
            timm.create_model('vit_tiny_patch16_224', num_classes=10, depth=3, class_token=False,
                              global_pool='avg'),                                                # GAP, no prefix
            timm.create_model('vit_small_patch16_224', num_classes=10, depth=2)):               # other width
        task = TrajectoryDistillationTask(timm.create_model('odevit_tiny_cifar', steps=6), teacher, tokens='all')
        out = task(x, y)
        assert torch.isfinite(out['loss']) and out['kd_loss'] > 0


def test_init_student_from_teacher_copies_and_freezes():
    teacher = timm.create_model('vit_base_patch16_224', num_classes=10, depth=2)
    student = timm.create_model('odevit_small_patch16_224', reg_tokens=0, steps=2)
    TrajectoryDistillationTask(student, teacher, init_student_from_teacher=True)
    torch.testing.assert_close(student.patch_embed.proj.weight, teacher.patch_embed.proj.weight)
    torch.testing.assert_close(student.pos_embed, teacher.pos_embed)
    torch.testing.assert_close(student.head.weight, teacher.head.weight)
    assert not student.pos_embed.requires_grad and not student.patch_embed.proj.weight.requires_grad
    assert student.pos_embed.data_ptr() != teacher.pos_embed.data_ptr()  # a copy, not the teacher's parameter
    assert student.head.weight.requires_grad


def test_ce_curriculum():
    task = TrajectoryDistillationTask(timm.create_model('odevit_tiny_cifar', steps=4), _teacher(), ce_start_epoch=1)
    x, y = torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,))
    task.trainable_module.train()  # epoch 0
    out = task(x, y)
    torch.testing.assert_close(out['loss'], out['kd_loss'])
    task.trainable_module.train()  # epoch 1
    out = task(x, y)
    torch.testing.assert_close(out['loss'], out['kd_loss'] + out['task_loss'])


# ---- bad input ---------------------------------------------------------------------------------
def test_teacher_without_intermediates():
    with pytest.raises(TypeError, match='forward_intermediates'):
        TrajectoryDistillationTask(timm.create_model('odevit_tiny_cifar'), torch.nn.Linear(3, 3))


def _kd_by_hand(task, teacher, student_states, blocks, x):
    """The trajectory loss recomputed: the teacher's [CLS] at ``blocks`` against the student's projected [CLS]."""
    x_t = F.interpolate(x * task.student_std + task.student_mean, size=(224, 224), mode='bicubic', align_corners=False)
    with torch.no_grad():
        h = teacher.forward_intermediates((x_t - task.teacher.mean_kd) / task.teacher.std_kd, output_fmt='NLC',
                                          return_prefix_tokens=True, intermediates_only=True)
    proj = task.trainable_module.projection
    return torch.stack([F.mse_loss(proj(prefix[:, 0]), h[k][1][:, 0])
                        for (_, prefix), k in zip(student_states, blocks)]).mean()


def test_a_teacher_deeper_than_the_grid_aligns_its_nearest_block_to_every_time_point():
    x, y = torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,))
    teacher, student = _teacher(), timm.create_model('odevit_tiny_cifar', steps=2)  # 4 blocks onto t = 0.5, 1
    task = TrajectoryDistillationTask(student, teacher, criterion=torch.nn.CrossEntropyLoss())
    assert (task.trainable_module.teacher_blocks, task.trainable_module.indices) == ([1, 3], [0, 1])
    out = task(x, y)
    final, states = student.forward_intermediates(x, indices=[0, 1], output_fmt='NLC', return_prefix_tokens=True)
    torch.testing.assert_close(out['kd_loss'], _kd_by_hand(task, teacher, states, [1, 3], x), rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(out['output'], student.forward_head(final))


def test_a_student_that_draws_its_depth_is_aligned_to_each_drawn_grid():
    x, y = torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,))
    teacher, student = _teacher(), timm.create_model('odevit_tiny_cifar', steps=6, train_depth=(2, 8))
    task = TrajectoryDistillationTask(student, teacher, criterion=torch.nn.CrossEntropyLoss(), jasmin_weight=0.5)
    task.train()
    seen = set()
    for seed in range(6):
        torch.manual_seed(seed)
        depth = int(torch.randint(2, 9, ()))  # the draw the forward below makes
        torch.manual_seed(seed)
        out = task(x, y)
        assert student.nfe == depth
        blocks, points = align_time_points(4, depth)
        student.eval().set_solver(steps=depth)
        final, states = student.forward_intermediates(x, indices=points, output_fmt='NLC', return_prefix_tokens=True)
        student.set_solver(steps=6)
        task.train()
        torch.testing.assert_close(out['kd_loss'], _kd_by_hand(task, teacher, states, blocks, x), rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(out['output'], student.forward_head(final), rtol=1e-4, atol=1e-5)
        out['loss'].backward()
        seen.add(depth < 4)
    assert seen == {True, False}  # grids both coarser and finer than the teacher


def test_unknown_mapping_and_tokens():
    with pytest.raises(ValueError, match='mapping'):
        TrajectoryDistillationTask(timm.create_model('odevit_tiny_cifar'), _teacher(), mapping='cosine')
    with pytest.raises(ValueError, match='tokens'):
        TrajectoryDistillationTask(timm.create_model('odevit_tiny_cifar'), _teacher(), tokens='patches')


def test_teacher_checkpoint_missing_or_of_another_architecture(tmp_path):
    with pytest.raises(FileNotFoundError, match='does not exist'):
        load_teacher('vit_tiny_patch16_224', str(tmp_path / 'nope.pth'))
    path = tmp_path / 'teacher.pth'
    torch.save(_teacher().state_dict(), path)  # depth 4
    with pytest.raises(ValueError, match='does not match'):
        load_teacher('vit_small_patch16_224', str(path))
    with pytest.raises(ValueError, match='missing keys'):
        load_teacher('vit_tiny_patch16_224', str(path))  # 12-block architecture, 4-block checkpoint


# ---- attention regularisers ----------------------------------------------------------------------
def test_jasmin_matches_its_definition():
    from timm_odevit.tasks import jasmin_loss
    probs = torch.tensor([[0.1, 0.6, 0.3], [0.2, 0.2, 0.6], [1 / 3, 1 / 3, 1 / 3]]).view(1, 1, 3, 3)
    # sorted rows: (.6, .3, .1), (.6, .2, .2), (1/3, 1/3, 1/3); g_j = p_j (1 - p_j + p_{j+1})
    g = lambda p: [p[0] * (1 - p[0] + p[1]), p[1] * (1 - p[1] + p[2]), p[2] * (1 - p[2])]  # noqa: E731
    rows = [(.6, .3, .1), (.6, .2, .2), (1 / 3, 1 / 3, 1 / 3)]
    expected = max(torch.log(torch.tensor(g(r)[0] / g(r)[1])).item() for r in rows)
    assert jasmin_loss(probs, k=2).item() == pytest.approx(expected, rel=1e-5)
    with pytest.raises(ValueError, match='k must be'):
        jasmin_loss(probs, k=4)


def test_attention_mass_l1():
    from timm_odevit.tasks import attention_mass_l1
    m = torch.softmax(torch.randn(2, 64), -1)
    assert attention_mass_l1(m, m).item() == pytest.approx(0., abs=1e-7)
    teacher = torch.full((2, 196), 1 / 196)  # uniform 14x14 -> uniform 8x8
    assert attention_mass_l1(torch.full((2, 64), 1 / 64), teacher).item() == pytest.approx(0., abs=1e-6)


def test_task_with_attention_regularisers_trains():
    student = timm.create_model('odevit_tiny_cifar', steps=4)
    task = TrajectoryDistillationTask(student, _teacher(), attn_mass_weight=0.25, jasmin_weight=1.0, jasmin_k=2)
    out = task(torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,)))
    assert torch.isfinite(out['attn_mass_loss']) and torch.isfinite(out['jasmin_loss'])
    torch.testing.assert_close(out['loss'], out['task_loss'] + out['kd_loss'] + 0.25 * out['attn_mass_loss']
                               + out['jasmin_loss'])
    out['loss'].backward()
    assert student.field.attn.qkv.weight.grad is not None
    with pytest.raises(ValueError, match='attention-mass loss needs a \\[CLS\\]'):
        gap = timm.create_model('vit_tiny_patch16_224', num_classes=10, depth=3, class_token=False, global_pool='avg')
        TrajectoryDistillationTask(timm.create_model('odevit_tiny_cifar', steps=4), gap, attn_mass_weight=0.5)


def test_odeified_vit_distils_from_its_original():
    from timm_odevit import odeify
    teacher = _teacher()
    student = odeify(teacher, init='mean')
    task = TrajectoryDistillationTask(student, teacher, jasmin_weight=0.1)
    assert task.trainable_module.indices == [0, 1, 2, 3]
    out = task(torch.randn(2, 3, 224, 224), torch.randint(0, 10, (2,)))
    out['loss'].backward()
    assert student.blocks.field.block.attn.qkv.weight.grad is not None
    with pytest.raises(TypeError, match='has no ODE trajectory'):
        TrajectoryDistillationTask(_teacher(), _teacher())
