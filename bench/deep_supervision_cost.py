"""Training-step cost of stage-wise deep supervision on a recurrent bViT, timed interleaved.

One AdamW update (forward, loss, backward, step) of ``--model`` trained plainly (loss on the last
iterate) vs with deep supervision at ``--stages`` (shared head; the loss of
:class:`timm_odevit.tasks.DeepSupervisionTask`), same batch, in one run with the order rotated
every round, so that drift in the machine's load hits both alike (it does not remove the noise of a
busy machine: the run on file gave a ratio below 1, and the 3-epoch runs of deep_supervision_horizon.py
took longer with deep supervision; docs/results.md gives both). The extra work is one norm + head per
extra stage; the block evaluations are the same.

    python bench/deep_supervision_cost.py [--batch 64] [--stages 3 6 9 12] [--repeats 8]

Writes results/deep_supervision_cost.json.
"""
import argparse

import timm
import torch

import timm_odevit  # noqa: F401
from timm_odevit.tasks.deep_supervision import deep_supervision_loss
from _util import time_interleaved, write_result


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--model', default='bvit_tiny_cifar')
    p.add_argument('--stages', type=int, nargs='+', default=[3, 6, 9, 12])
    p.add_argument('--batch', type=int, default=64)
    p.add_argument('--repeats', type=int, default=8)
    args = p.parse_args()
    torch.manual_seed(0)
    models = {
        'plain': timm.create_model(args.model, num_classes=10),
        'deep_supervision': timm.create_model(args.model, num_classes=10, stages=args.stages),
    }
    models['deep_supervision'].stage_outputs = True  # what DeepSupervisionTask sets
    x = torch.randn(args.batch, *models['plain'].pretrained_cfg['input_size'])
    y = torch.randint(0, 10, (args.batch,))
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=0.1)

    def update(model):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def run():
            out = model(x)
            loss = (deep_supervision_loss(out, y, criterion, model.stage_weights) if isinstance(out, list)
                    else criterion(out, y))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        return run

    for m in models.values():
        m.train()
    times = time_interleaved({n: update(m) for n, m in models.items()}, repeats=args.repeats, warmup=1)
    ratio = times['deep_supervision']['median_s'] / times['plain']['median_s']
    path = write_result('deep_supervision_cost', {
        'model': args.model, 'stages': args.stages, 'batch': args.batch,
        'seconds_per_update': times, 'deep_supervision_over_plain': round(ratio, 3)})
    print(f"plain {times['plain']['median_s']:.3f} s, deep supervision {times['deep_supervision']['median_s']:.3f} s "
          f'per update of {args.batch}: ×{ratio:.3f}  ({path})')


if __name__ == '__main__':
    main()
