"""Anytime training (``train_depth``) under DDP: ranks drawing the same depth vs drawing their own.

Two CPU processes on the gloo backend (1 thread each), odevit_tiny_cifar at Euler 6 with train_depth=(3, 9),
the global RNG seeded per rank as timm's train.py does. ``shared`` is the package's behaviour (rank 0
broadcasts one seed, every rank draws the same depth); ``independent`` gives each rank its own draw (the
behaviour before), so every update waits for the deeper rank. Rounds alternate the two modes (machines are
noisy); the update time is rank 0's wall time of forward + backward + step.

    python bench/ddp_train_depth.py [--batch 32] [--updates 10] [--rounds 4]
"""
import argparse
import os
import random
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from _util import write_result


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _worker(rank, world, port, args, queue):
    import timm
    import timm_odevit  # noqa: F401
    from timm_odevit.layers.depth_stack import depth_stack
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group('gloo', rank=rank, world_size=world)
    torch.manual_seed(0)
    model = timm.create_model('odevit_tiny_cifar', steps=6, train_depth=(3, 9)).train()
    torch.manual_seed(100 + rank)  # per-rank seeds, as train.py
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
    stack = depth_stack(model)
    x = torch.randn(args.batch, 3, 32, 32)
    y = torch.randint(0, 10, (args.batch,))
    draws = {'shared': None, 'independent': random.Random(1000 + rank)}
    rows = {mode: {'seconds': [], 'depth': [], 'max_depth': []} for mode in draws}

    def update():
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()

    update()  # warm-up (and the shared seed's broadcast)
    shared = stack.__dict__['_shared_draw']
    draws['shared'] = shared
    for r in range(args.rounds):
        for mode in (('shared', 'independent') if r % 2 == 0 else ('independent', 'shared')):
            stack.__dict__['_shared_draw'] = draws[mode]
            for _ in range(args.updates):
                dist.barrier()
                t0 = time.perf_counter()
                update()
                seconds = time.perf_counter() - t0
                depth = torch.tensor([stack.nfe])
                depths = [torch.zeros_like(depth) for _ in range(world)]
                dist.all_gather(depths, depth)
                rows[mode]['seconds'].append(seconds)
                rows[mode]['depth'].append(stack.nfe)
                rows[mode]['max_depth'].append(max(int(d) for d in depths))
    if rank == 0:
        queue.put(rows)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--batch', type=int, default=32)
    p.add_argument('--updates', type=int, default=10, help='updates per mode and round')
    p.add_argument('--rounds', type=int, default=4)
    args = p.parse_args()
    t0 = time.time()
    queue = mp.get_context('spawn').SimpleQueue()
    mp.spawn(_worker, args=(2, _free_port(), args, queue), nprocs=2, join=True)
    rows = queue.get()
    results = {mode: {'median_update_s': statistics.median(r['seconds']), 'updates': len(r['seconds']),
                      'mean_depth_rank0': statistics.mean(r['depth']), 'mean_max_depth': statistics.mean(r['max_depth']),
                      'seconds': r['seconds'], 'max_depth': r['max_depth']} for mode, r in rows.items()}
    ratio = results['independent']['median_update_s'] / results['shared']['median_update_s']
    print('| mode | median update (s) | mean depth (rank 0) | mean deepest rank |\n|---|---|---|---|')
    for mode, r in results.items():
        print(f"| {mode} | {r['median_update_s']:.3f} | {r['mean_depth_rank0']:.2f} | {r['mean_max_depth']:.2f} |")
    print(f'independent / shared update time: {ratio:.2f}x')
    path = write_result('ddp_train_depth', {
        'budget': f'2 gloo processes x 1 thread, odevit_tiny_cifar euler 6, train_depth (3, 9), batch {args.batch}/rank, '
                  f'{args.rounds} rounds x {args.updates} updates per mode, alternating',
        'results': results, 'independent_over_shared': ratio, 'seconds': round(time.time() - t0, 1)})
    print(f'wrote {path}')


if __name__ == '__main__':
    main()
