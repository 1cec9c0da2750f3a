"""The deep-supervision stages of a bViT: the time points that get a loss, and their weights."""
import math
from typing import Optional, Sequence, Tuple

from .._checks import is_int


def check_stages(stages: Sequence[int], num_points: Optional[int] = None) -> Tuple[int, ...]:
    """``stages`` as a tuple: 1-based, strictly increasing, and within ``num_points`` if given."""
    stages = tuple(stages)
    if not stages or not all(is_int(s) for s in stages):
        raise ValueError(f'stages must be a non-empty sequence of integers, got {stages!r}')
    if any(b <= a for a, b in zip(stages, stages[1:])):
        raise ValueError(f'stages must be strictly increasing, got {stages}')
    if stages[0] < 1 or (num_points is not None and stages[-1] > num_points):
        raise ValueError(
            f'stages {stages} lie outside the horizon: time points are 1..{num_points or "N"}'
        )
    return tuple(map(int, stages))


def normalised_weights(stage_weights: Optional[Sequence[float]], num_stages: int) -> Tuple[float, ...]:
    """``stage_weights`` (default uniform) normalised to sum 1; ValueError unless they are ``num_stages`` finite
    non-negative numbers with a positive sum."""
    weights = [1.0] * num_stages if stage_weights is None else [float(w) for w in stage_weights]
    valid = all(math.isfinite(w) and w >= 0 for w in weights) and sum(weights) > 0
    if len(weights) != num_stages or not valid:
        raise ValueError(
            f'stage_weights must be {num_stages} finite non-negative numbers with a positive sum, got {stage_weights!r}'
        )
    return tuple(w / sum(weights) for w in weights)
