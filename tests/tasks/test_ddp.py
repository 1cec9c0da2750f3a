"""Two CPU processes on the gloo backend: our models and tasks under DistributedDataParallel."""
import os
import socket

import pytest
import timm
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from timm.task import ClassificationTask
from timm.utils import unwrap_model

from timm_odevit.layers.depth_stack import depth_stack


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _build(case):
    import timm_odevit  # noqa: F401  (spawned processes start fresh)
    from timm_odevit.tasks import DeepSupervisionTask, TrajectoryDistillationTask
    torch.manual_seed(0)  # identical initial weights on every rank
    if case == 'odevit':
        return ClassificationTask(timm.create_model('odevit_tiny_cifar', steps=2))
    if case == 'odevit_train_depth':  # anytime training, the global RNG seeded per rank as train.py does
        task = ClassificationTask(timm.create_model('odevit_tiny_cifar', steps=2, train_depth=(1, 4)))
        torch.manual_seed(100 + dist.get_rank())
        return task
    if case == 'bvit_ode_rk4':
        return ClassificationTask(timm.create_model('bvit_tiny_cifar', regime='ode', solver='rk4', steps=1,
                                                    iterations=4))
    if case == 'bvit_deep_supervision':
        model = timm.create_model('bvit_tiny_cifar', iterations=4, stages=(2, 4), stage_heads='separate')
        return DeepSupervisionTask(model)
    if case == 'trajectory':  # an anytime student: each drawn grid (1-4 steps) aligned with a 3-block teacher
        teacher = timm.create_model('vit_tiny_patch16_224', num_classes=10, depth=3)
        task = TrajectoryDistillationTask(timm.create_model('odevit_tiny_cifar', steps=4, train_depth=(1, 4)),
                                          teacher, mapping='arclength')
        torch.manual_seed(100 + dist.get_rank())
        return task
    raise ValueError(case)


def _worker(rank, world, case, port):
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group('gloo', rank=rank, world_size=world)
    try:
        task = _build(case)
        task.prepare_distributed()
        module = task.get_trainable_module()
        params = [p for p in module.parameters() if p.requires_grad]
        opt = torch.optim.SGD(params, lr=0.1)
        depths = []
        drawing = case in ('odevit_train_depth', 'trajectory')
        for step in range(8 if drawing else 2):  # a 2nd step fails if a parameter went unused
            g = torch.Generator().manual_seed(1000 * step + rank)  # different data on each rank
            x, y = torch.randn(4, 3, 32, 32, generator=g), torch.randint(0, 10, (4,), generator=g)
            task.train()
            out = task(x, y)
            out['loss'].backward()
            if drawing:
                inner = task.trainable_module.module
                depths.append(depth_stack(getattr(inner, 'student', inner)).nfe)
            grads = torch.cat([p.grad.flatten() for p in params])
            gathered = [torch.zeros_like(grads) for _ in range(world)]
            dist.all_gather(gathered, grads)
            torch.testing.assert_close(gathered[0], gathered[1], msg=f'{case}: gradients differ across ranks')
            assert grads.abs().sum() > 0
            opt.step()
            opt.zero_grad()
        if drawing:  # the same draws on every rank (independent: 1 in 4^8 to agree)
            drawn = torch.tensor(depths)
            gathered = [torch.zeros_like(drawn) for _ in range(world)]
            dist.all_gather(gathered, drawn)
            assert torch.equal(gathered[0], gathered[1]), f'ranks drew different depths: {gathered}'
            assert len(set(depths)) > 1, depths
        if case == 'trajectory':
            idx = torch.tensor(unwrap_model(module).indices)
            gathered = [torch.zeros_like(idx) for _ in range(world)]
            dist.all_gather(gathered, idx)
            assert torch.equal(gathered[0], gathered[1]), 'ranks calibrated different time points'
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize('case', ['odevit', 'odevit_train_depth', 'bvit_ode_rk4', 'bvit_deep_supervision',
                                  'trajectory'])
def test_ddp_two_cpu_processes(case):
    mp.spawn(_worker, args=(2, case, _free_port()), nprocs=2, join=True)


def _worker_nan_on_one_rank(rank, world, port, report):
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group('gloo', rank=rank, world_size=world)
    task = _build('odevit')
    task.prepare_distributed()
    x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    if rank == 1:
        x[0, 0, 0, 0] = float('nan')
    task.train()
    try:
        task(x, y)['loss'].backward()  # rank 0 waits here in DDP's all-reduce for rank 1
    except FloatingPointError as e:
        with open(report, 'w') as f:
            f.write(f'rank {rank}: {e}')
        raise


def test_a_non_finite_state_on_one_rank_ends_the_whole_job(tmp_path):
    """The decision under DDP: the rank that meets a non-finite state raises (naming the cause) and the
    launcher (mp.spawn here; torchrun's agent likewise) tears the other ranks down: nobody waits forever.
    (Whichever rank the launcher reports first: rank 1's error, or rank 0's lost connection to it.)"""
    import time
    report = tmp_path / 'error.txt'
    context = mp.spawn(_worker_nan_on_one_rank, args=(2, _free_port(), str(report)), nprocs=2, join=False)
    deadline = time.time() + 120
    with pytest.raises(mp.ProcessRaisedException):
        while not context.join(timeout=5):
            if time.time() > deadline:
                for p in context.processes:
                    p.kill()
                pytest.fail('the other rank kept waiting after one rank raised')
    for p in context.processes:
        p.join(timeout=30)
    assert not any(p.is_alive() for p in context.processes)
    assert report.read_text().startswith('rank 1: the state entering the ODE already holds NaN/Inf')
    assert 'the input images hold NaN/Inf' in report.read_text()
