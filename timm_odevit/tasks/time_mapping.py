"""Map a teacher's L block outputs to a student ODE's time points.

Student time points are 0-based indices into t_1..t_N (index i is t_{i+1} = (i+1)/N of the
horizon). With L <= N every block gets a point: L strictly increasing indices ending at N − 1.
With L > N (a deeper teacher, or a coarse grid drawn by ``train_depth``) every point gets a block,
:func:`align_time_points`: t_i takes the block whose time τ_k on the mapping's axis is nearest
(uniform τ_k = k/L; arclength the covered fraction; softmax cumsum(softmax(d / T))).

  * ``uniform``:   block k ↦ t_k = k/L.
  * ``arclength``: block k ↦ the fraction of the teacher's trajectory length covered by h_1..h_k,
    with the distances d_k = E‖h_k − h_{k−1}‖ measured on a calibration batch.
  * ``softmax``:   the reference's rule c = cumsum(round(softmax(d / T) · N)) (T = 30), but with d
    measured on the real teacher instead of a hard-coded vector.
"""
import math
from typing import List, Optional, Sequence, Tuple

import torch

from .._checks import check_int, check_number

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
    d = torch.stack(hidden).float().diff(dim=0).norm(dim=-1).flatten(1).mean(1).tolist()
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


def _teacher_times(
    L: int, mapping: str, distances: Optional[Sequence[float]], temperature: float
) -> torch.Tensor:
    """τ_1..τ_L in (0, 1]: where each teacher block lies on the student's horizon (softmax: unrounded)."""
    if mapping == 'uniform':
        return torch.arange(1, L + 1, dtype=torch.float64) / L
    if distances is None or len(distances) != L:
        raise ValueError(
            f'mapping {mapping!r} needs {L} measured teacher step distances, got {distances!r}'
        )
    d = torch.tensor([float(x) for x in distances], dtype=torch.float64)
    if not (d.isfinite().all() and (d >= 0).all()) or (mapping == 'arclength' and d.sum() <= 0):
        raise ValueError(
            f'mapping {mapping!r} needs finite, non-negative teacher step distances (not all 0 for '
            f"'arclength'), got {[round(x, 4) for x in d.tolist()]}: use mapping='uniform'"
        )
    return (
        d / d.sum() if mapping == 'arclength' else torch.softmax(d / temperature, dim=0)
    ).cumsum(0)


def align_time_points(num_teacher: int, num_student: int, mapping: str = 'uniform',
                      distances: Optional[Sequence[float]] = None,
                      temperature: float = 30.) -> Tuple[List[int], List[int]]:
    """(teacher blocks, student time points), 0-based, aligned pairwise, both strictly increasing and ending at
    (L − 1, N − 1): every block when L <= N (:func:`map_teacher_to_student`), else every time point, each taking
    the teacher block nearest its time (ties: the deeper block)."""
    check_int('num_student', num_student, 1)
    if num_teacher <= num_student:
        return list(range(num_teacher)), map_teacher_to_student(
            num_teacher, num_student, mapping, distances, temperature)
    tau = _teacher_times(num_teacher, mapping, distances, check_mapping(mapping, temperature))
    t = torch.arange(1, num_student + 1, dtype=torch.float64) / num_student
    # flipped: argmin's first = deepest tie
    gap = (tau[None, :] - t[:, None]).abs().round(decimals=12).flip(1)
    return _fix_monotone((num_teacher - 1 - gap.argmin(1)).tolist(), num_teacher), list(
        range(num_student)
    )


def map_teacher_to_student(
        num_teacher: int,
        num_student: int,
        mapping: str = 'uniform',
        distances: Optional[Sequence[float]] = None,
        temperature: float = 30.,
) -> List[int]:
    """Student time-point index (0-based) for each teacher block 1..L (L <= N): ⌈τ_k·N⌉, and for softmax the
    reference's rounded formula."""
    temperature = check_mapping(mapping, temperature)
    if num_teacher < 1:
        raise ValueError('the teacher has no blocks to align')
    if num_teacher > num_student:
        raise ValueError(
            f'cannot map {num_teacher} teacher blocks onto {num_student} student time points one to '
            'one: align_time_points gives every time point a block instead'
        )
    tau = _teacher_times(num_teacher, mapping, distances, temperature)
    N = num_student
    if mapping == 'softmax':  # c = cumsum(round(softmax(d / T) · N)), 1-based grid points
        tau = torch.cumsum(torch.round(torch.diff(tau, prepend=tau.new_zeros(1)) * N), 0) / N
    return _fix_monotone([math.ceil(f * N - 1e-9) - 1 for f in tau.tolist()], N)
