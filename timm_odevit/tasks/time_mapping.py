"""Map a teacher's L block outputs to a student ODE's time points.

Student time points are 0-based indices into t_1..t_N (index i is t_{i+1} = (i+1)/N of the
horizon). Every mapping returns L strictly increasing indices ending at N − 1.

  * ``uniform``:   block k ↦ t_k = k/L.
  * ``arclength``: block k ↦ the fraction of the teacher's trajectory length covered by h_1..h_k,
    with the distances d_k = E‖h_k − h_{k−1}‖ measured on a calibration batch.
  * ``softmax``:   the reference's rule c = cumsum(round(softmax(d / T) · N)) (T = 30), but with d
    measured on the real teacher instead of a hard-coded vector.
"""
import math
from typing import List, Optional, Sequence

import torch

from .._checks import check_number

MAPPINGS = ('uniform', 'arclength', 'softmax')


def check_mapping(mapping: str, temperature: float) -> float:
    """ValueError unless ``mapping`` is one of :data:`MAPPINGS` and the softmax mapping's T a finite number > 0 (the
    reference uses 30); returns T as a float."""
    if mapping not in MAPPINGS:
        raise ValueError(f'Unknown mapping {mapping!r}; choose one of {MAPPINGS}')
    return check_number('mapping temperature', temperature, positive=True)


def teacher_step_distances(hidden: Sequence[torch.Tensor]) -> List[float]:
    """d_k = mean ‖h_k − h_{k−1}‖ over the batch (token vectors), k = 2..L; d_1 := mean(d_2..d_L)
    (the embedding before block 1 is not exposed by forward_intermediates)."""
    if len(hidden) < 2:
        return [1.0] * len(hidden)
    d = [(b.float() - a.float()).norm(dim=-1).mean().item() for a, b in zip(hidden[:-1], hidden[1:])]
    return [sum(d) / len(d)] + d


def _fix_monotone(idx: Sequence[int], num_student: int) -> List[int]:
    L = len(idx)
    out = []
    for k, i in enumerate(idx):
        lo = out[-1] + 1 if out else 0
        hi = num_student - (L - k)  # leave room for the remaining blocks
        out.append(min(max(int(i), lo), hi))
    out[-1] = num_student - 1
    return out


def map_teacher_to_student(
        num_teacher: int,
        num_student: int,
        mapping: str = 'uniform',
        distances: Optional[Sequence[float]] = None,
        temperature: float = 30.,
) -> List[int]:
    """Student time-point index (0-based) for each teacher block 1..L."""
    check_mapping(mapping, temperature)
    if num_teacher < 1:
        raise ValueError('the teacher has no blocks to align')
    if num_teacher > num_student:
        raise ValueError(f'cannot map {num_teacher} teacher blocks onto {num_student} student time points: give the '
                         f'student steps={num_teacher} or more, or distil a shallower teacher')
    L, N = num_teacher, num_student
    if mapping == 'uniform':
        return _fix_monotone([math.ceil(k * N / L) - 1 for k in range(1, L + 1)], N)
    if distances is None or len(distances) != L:
        raise ValueError(f'mapping {mapping!r} needs {L} measured teacher step distances, got {distances!r}')
    d = torch.tensor([float(x) for x in distances], dtype=torch.float64)
    if not (d.isfinite().all() and (d >= 0).all()) or (mapping == 'arclength' and d.sum() <= 0):
        raise ValueError(f'mapping {mapping!r} needs finite, non-negative teacher step distances (not all 0 for '
                         f"'arclength'), got {[round(x, 4) for x in d.tolist()]}: use mapping='uniform'")
    if mapping == 'arclength':
        frac = d.cumsum(0) / d.sum()
        return _fix_monotone([math.ceil(f * N - 1e-9) - 1 for f in frac.tolist()], N)
    c = torch.cumsum(torch.round(torch.softmax(d / temperature, dim=0) * N), 0)  # 1-based grid points
    return _fix_monotone([int(x) - 1 for x in c.tolist()], N)
