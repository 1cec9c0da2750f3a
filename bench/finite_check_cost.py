"""What the finiteness check (``check_finite``, on by default) costs at inference.

With the check on, a model's forward checks its final state and its logits together: one reduction each and one
device sync per forward. Times ``model(x)`` under ``torch.no_grad`` with ``check_finite`` True and False, timed
interleaved (the order rotates every round), for odevit_tiny_cifar (6 Euler steps) and bvit_tiny_cifar (the
recurrence, 12 iterations) at a few batch sizes. Also times the check alone on the model's final state and
logits (its share of an unchecked forward: robust where the forward-to-forward noise is larger than the check)
and, on CUDA, counts the device syncs per forward (``torch.cuda.set_sync_debug_mode``). Writes
bench/results/finite_check_cost.json (with machine, commit, date and command).

    ../.venv/bin/python finite_check_cost.py [--batch-sizes 1 32 128] [--repeats 30] [--device cpu]
"""
import argparse
import warnings

import timm
import torch

import timm_odevit  # noqa: F401
from _util import inference_step, time_interleaved, write_result

MODELS = {'odevit_tiny_cifar': dict(steps=6), 'bvit_tiny_cifar': {}}


def _syncs_per_forward(model, x) -> int:
    if x.device.type != 'cuda':
        return 0  # no device to wait for
    torch.cuda.set_sync_debug_mode('warn')
    try:
        with warnings.catch_warnings(record=True) as caught, torch.no_grad():
            warnings.simplefilter('always')
            model(x)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    return sum('synchroniz' in str(w.message) for w in caught)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--batch-sizes', type=int, nargs='+', default=[1, 32, 128])
    p.add_argument('--repeats', type=int, default=30)
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    args = p.parse_args()
    device = torch.device(args.device)
    rows = []
    for name, kwargs in MODELS.items():
        checked = timm.create_model(name, **kwargs).eval().to(device)
        unchecked = timm.create_model(name, check_finite=False, **kwargs).eval().to(device)
        unchecked.load_state_dict(checked.state_dict())
        for batch in args.batch_sizes:
            x = torch.randn(batch, 3, 32, 32, device=device)
            with torch.no_grad():
                state, logits = checked.forward_features(x), checked(x)

            def check():  # the check itself: what the checked forward adds (one reduction each, one sync)
                bool(torch.stack([torch.isfinite(state).all(), torch.isfinite(logits).all()]).all())
            steps = {'checked': inference_step(checked, x), 'unchecked': inference_step(unchecked, x), 'check': check}
            times = time_interleaved(steps, args.repeats, warmup=3)
            on, off = times['checked']['median_s'], times['unchecked']['median_s']
            rows.append(dict(model=name, batch=batch, checked_ms=1e3 * on, unchecked_ms=1e3 * off, ratio=on / off,
                             check_alone_ms=1e3 * times['check']['median_s'],
                             check_alone_fraction=times['check']['median_s'] / off,
                             syncs_per_forward=_syncs_per_forward(checked, x),
                             syncs_per_forward_unchecked=_syncs_per_forward(unchecked, x), repeats=args.repeats))
            print(f'| {name} | {batch} | {1e3 * on:.2f} | {1e3 * off:.2f} | {on / off:.3f} | '
                  f'{1e3 * times["check"]["median_s"]:.3f} |', flush=True)
    path = write_result('finite_check_cost', dict(device=str(device), rows=rows))  # + machine, commit, date, command
    print(f'wrote {path}')


if __name__ == '__main__':
    main()
