"""Anytime training: a continuous-depth stack whose training forwards each integrate a depth drawn at random."""
import random
from typing import List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

from .._checks import is_int
from .._compat import has_module_hooks
from .solver import SolverConfig

TRAIN_DIALS = ('steps', 'horizon')


class DrawnDepth:
    """The draw of a :class:`~.depth_stack.ContinuousDepthStack` (this mixin's host): the depth range, the dial it
    turns, and the states of a drawn grid."""

    # class default: slices stack[:n] train on their own grid
    train_depth: Optional[Tuple[int, int]] = None
    train_dial: str = 'steps'
    _shared_draw: Optional[random.Random] = None  # under torch.distributed, see _draw_depth

    def set_train_depth(self, depth_range: Optional[Sequence[int]], dial: Optional[str] = None) -> None:
        """Anytime training: every forward in training mode integrates a depth drawn uniformly from ``depth_range`` =
        (lo, hi), inclusive, with torch's global RNG (under torch.distributed the same depth on every rank, see
        :meth:`_draw_depth`); eval mode and slices use the configured grid. ``dial``: what the depth counts, 'steps'
        (grid steps over [0, t_end]) or 'horizon' (the span [0, depth] at the same step length). None turns it off.
        torch.compile compiles one graph per drawn depth; ``fullgraph=True`` cannot compile the draw, a Python choice
        at run time: compile without it, or train on a fixed grid (train_depth None)."""
        dial = self.train_dial if dial is None else dial
        if dial not in TRAIN_DIALS:
            raise ValueError(f'Unknown train depth dial {dial!r}: choose one of {TRAIN_DIALS}')
        if depth_range is not None:
            lo, hi = depth_range if isinstance(depth_range, (tuple, list)) and len(depth_range) == 2 else (0, 0)
            if not (is_int(lo) and is_int(hi) and 1 <= lo <= hi):
                raise ValueError(
                    f'train_depth must be two integers (lo, hi) with 1 <= lo <= hi, got {depth_range!r}'
                )
            depth_range = (int(lo), int(hi))
            # each must make a valid grid (max_steps, h)
            for depth in range(depth_range[0], depth_range[1] + 1):
                try:
                    self._depth_config(depth, dial)
                except ValueError as e:
                    raise ValueError(
                        f'train_depth {depth_range}: its depth {depth} ({dial}) makes no grid of '
                        f'{self.solver.describe()}: {e}'
                    ) from None
        self.train_depth = depth_range
        self.train_dial = dial

    def _depth_config(self, depth: int, dial: Optional[str] = None) -> SolverConfig:
        """The solver at ``depth`` on the training dial (see :meth:`set_train_depth`)."""
        if self.solver.is_adaptive:
            raise ValueError(
                f'train_depth draws a number of grid steps, but {self.solver.method!r} chooses its own '
                'steps: use a fixed-grid method (e.g. euler or rk4) or train_depth=None'
            )
        if (dial or self.train_dial) == 'horizon':
            return self.solver.replace(t_end=float(depth))
        return self.solver.replace(steps=depth)

    def drawn_states(self, x: torch.Tensor) -> List[torch.Tensor]:
        """Training with ``train_depth``: X(t_1) … X(t_n) on the grid of one drawn depth (n = its steps), the last
        checked; what a training forward integrates."""
        if not (self.training and self.train_depth is not None):
            raise ValueError('drawn_states integrates a drawn depth: call it in training mode with train_depth set')
        hooked = [str(m.index) for m in self if has_module_hooks(m)]
        if hooked:
            raise self.drawn_error(f'intervals {", ".join(hooked)} carry hooks on')
        cfg = self._drawn_config(x.device)
        states = [x]
        nfe = 0
        while len(states) <= cfg.steps:
            new, evals = self._advance(states[-1], len(states) - 1, cfg)
            states = states + new
            nfe = nfe + evals
        self.shared.nfe = nfe
        self.shared.last_interval = None
        self.checked(x, states[-1])
        return states[1:]

    def drawn_error(self, what: str) -> ValueError:
        return ValueError(
            f'train_depth draws the depth of every training forward, but {what} the configured grid '
            f'({self.solver.describe()}): read intervals (hooks, forward_intermediates, torch.fx, timm\'s '
            'grad checkpointing) in eval mode, set train_depth=None, or for grad checkpointing set '
            'blocks.grad_checkpointing = True'
        )

    # the drawn depth is a Python int: torch.compile compiles one graph per depth (its reason: fullgraph's error)
    @torch.compiler.disable(
        reason='train_depth draws the depth of every training forward in Python, which '
        'torch.compile(fullgraph=True) cannot compile: compile without fullgraph=True (one graph '
        'per drawn depth), or train on a fixed grid (set_train_depth(None))'
    )
    def _drawn_config(self, device: torch.device) -> SolverConfig:
        return self._depth_config(self._draw_depth(device))

    def _draw_depth(self, device: torch.device) -> int:
        """One training depth from ``train_depth``. A single process draws with torch's global RNG. Under
        torch.distributed with world size > 1, train.py seeds each rank differently, so independent draws
        would make every update wait for the deepest rank's integration: instead rank 0 draws a seed from its
        global RNG at the first training forward and broadcasts it (one collective on ``device``, taken by
        every rank's first forward as DDP's lockstep does), and all ranks then draw from a Python RNG with
        that seed, the same depth at the same forward."""
        lo, hi = self.train_depth
        if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
            return int(torch.randint(lo, hi + 1, ()))
        if self._shared_draw is None:
            seed = torch.randint(2 ** 62, (1,), dtype=torch.int64).to(device)
            dist.broadcast(seed, src=0)
            self._shared_draw = random.Random(int(seed.item()))
        return self._shared_draw.randint(lo, hi)
