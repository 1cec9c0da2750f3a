"""ContinuousDepthStack: the depth of a continuous-depth ViT, standing where a ViT's blocks stand.

One shared field over the L intervals [t_i, t_{i+1}] of the solver's uniform grid (:mod:`.solver`). The stack is a
sequence of interval modules, as timm's ``blocks`` are, and its forward runs them in a loop, as timm's
``forward_intermediates``, feature hooks and torch.fx graphs do: interval i maps X(t_i) to X(t_{i+1}) on the true
times, so hooks on an interval fire wherever the depth is integrated.
"""
import random
from typing import Iterator, List, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist
import torch.fx
from torch import nn
from torch.utils.checkpoint import checkpoint
from timm.layers import register_notrace_module

from .._checks import is_int
from .._compat import has_module_hooks
from .diagnostics import _any_hooks, _check_no_mask, active_stochastic_modules, explain_non_finite
from .solver import SolverConfig, odeint_grid, rk_step

__all__ = [
    'ContinuousDepthStack',
    'DepthInterval',
    'depth_stack',
    'active_stochastic_modules',
    'explain_non_finite',
]
TRAIN_DIALS = ('steps', 'horizon')


class SharedDepthState:
    """What a stack shares with its slices ``stack[:n]`` (timm runs slices in forward_intermediates) and its
    intervals: the stack itself (``root``), the counters of the last forward, the rest of an ``odeint`` solve that
    the next interval continues (``walk``) and, while a model's forward runs, the finiteness checks left to it
    (``deferred``)."""

    def __init__(self, root: 'ContinuousDepthStack'):
        self.root = root
        self.nfe = 0
        self.walked = 0
        self.last_interval: Optional[int] = None
        self.walk: Optional[tuple] = None
        self.deferred: Optional[List[Tuple[torch.Tensor, torch.Tensor]]] = None


@register_notrace_module  # a leaf in torch.fx graphs: node 'blocks.i' is the state X(t_{i+1})
class DepthInterval(nn.Module):
    """Interval i of a :class:`ContinuousDepthStack`: X(t_i) (B, N, D) -> X(t_{i+1}) (B, N, D).

    For Runge–Kutta methods (and the recurrence) one step of the method from the x it is given, like a timm
    ``Block`` a function of its input and the weights. For Adams / adaptive methods interval i integrates from x to
    the end of the grid in one ``odeint`` call and returns X(t_{i+1}); the next interval, given that very tensor,
    returns the same solve's next state (the method's history and step size carry over), any other tensor (e.g.
    one a hook returned) starts a new solve there. Interval 0 registers the shared field (``blocks.0.field.*``), so
    timm's ViT ``group_matcher`` (``^blocks\\.(\\d+)``) puts it between stem and head; ``self.stack`` is reached
    through ``self.shared`` (:class:`SharedDepthState`), not a child module.
    """

    def __init__(self, shared: SharedDepthState, index: int, field: Optional[nn.Module] = None):
        super().__init__()
        self.shared = shared
        self.index = index
        if field is not None:
            self.field = field

    @property
    def stack(self) -> 'ContinuousDepthStack':
        """The stack this interval belongs to."""
        return self.shared.root

    def __prepare_scriptable__(self):
        """torch.jit.script calls this on every submodule first (an FX graph module's intervals too)."""
        return self.stack.__prepare_scriptable__()

    def forward(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None,
                is_causal: bool = False) -> torch.Tensor:
        _check_no_mask(attn_mask, is_causal)
        stack = self.stack
        if getattr(stack, str(self.index), None) is not self:
            raise RuntimeError(
                f'interval {self.index} was removed by a grid change to {len(stack)} intervals: take '
                'model.blocks[i] again, or trace the torch.fx graph again'
            )
        if self.training and stack.train_depth is not None:
            raise stack._drawn_error(f'interval {self.index} steps through')
        out = stack._run_interval(x, self.index)
        return stack.checked(x, out) if self.shared.deferred is None else out

    def extra_repr(self) -> str:
        h = self.stack.solver.h
        return f't=[{self.index * h:.4g}, {(self.index + 1) * h:.4g}]'


class ContinuousDepthStack(nn.Module):
    """Maps tokens X(0) (B, N, D) to X(t_L) through one shared ``field`` integrated by ``solver`` (a
    :class:`SolverConfig`), presented to timm as L blocks (:class:`DepthInterval`), L = ``solver.steps``.

    ``stack(x)`` runs the intervals in a loop and checks the final state once (``check_finite``, eager mode; an
    interval called on its own checks its output). ``stack[:n]`` is a view of the first n intervals (horizon t_n,
    same step length) sharing the field and the interval modules, as slicing timm's ``nn.Sequential`` of blocks
    does. A grid change keeps the interval modules and adds or removes them at the end, so hooks stay where they
    are; removing an interval that carries hooks is refused. After every forward, ``nfe`` holds the field
    evaluations made (steps × stages for Runge–Kutta methods, counted for the others). ``grad_checkpointing``
    recomputes each field evaluation in backward. With ``train_depth`` (:meth:`set_train_depth`) every training
    forward integrates a grid of a drawn depth instead of the intervals.

    A field that is random in training mode (dropout, drop-path) is refused with the adjoint (its backward pass
    re-samples the masks) and with adaptive methods (the error estimate would measure the noise).
    """

    # class default: slices stack[:n] train on their own grid
    train_depth: Optional[Tuple[int, int]] = None
    train_dial: str = 'steps'
    _shared_draw: Optional[random.Random] = None  # under torch.distributed, see _draw_depth

    def __init__(self, field: nn.Module, solver: Optional[SolverConfig] = None):
        super().__init__()
        self.shared = SharedDepthState(self)
        super().add_module('0', DepthInterval(self.shared, 0, field))
        self.grad_checkpointing = False
        self.solver = solver if solver is not None else SolverConfig()

    def __prepare_scriptable__(self):
        """torch.jit.script calls this on every submodule first: say why it cannot work."""
        raise RuntimeError(
            'TorchScript cannot compile the ODE depth of timm_odevit models (ContinuousDepthStack), '
            'whose solver is Python: use torch.compile, torch.export or torch.fx instead, or run eagerly'
        )

    # ---- configuration ----------------------------------------------------------------------
    @property
    def field(self) -> nn.Module:
        """The shared vector field (registered once, as ``0.field``)."""
        return self[0].field

    @property
    def solver(self) -> SolverConfig:
        return self._solver

    @solver.setter
    def solver(self, config: SolverConfig) -> None:
        if not isinstance(config, SolverConfig):
            raise TypeError(
                f'solver must be a SolverConfig, got {type(config).__name__}: build a SolverConfig()'
            )
        if self.shared.root is not self:
            raise ValueError(
                "this stack is a slice stack[:n]: change the solver of the model's stack (model.blocks)"
            )
        intervals = list(self.children())
        removed = intervals[config.steps:]
        hooked = [str(m.index) for m in removed if has_module_hooks(m)]
        if hooked:
            raise ValueError(
                f'intervals {", ".join(hooked)} carry hooks and a grid of {config.steps} intervals would '
                f'remove them: remove their hooks first, or keep at least {int(hooked[-1]) + 1} intervals'
            )
        self._solver = config
        self.shared.walk = None
        for m in removed:
            delattr(self, str(m.index))
        for i in range(len(intervals), config.steps):
            super().add_module(str(i), DepthInterval(self.shared, i).train(self.training))

    def set_solver(self, **changes) -> SolverConfig:
        """Change solver settings (method, steps, step_size, t_end, rtol, atol, adjoint, ...); returns the new config."""
        self.solver = self.solver.replace(**changes)
        return self.solver

    def set_train_depth(
        self, depth_range: Optional[Sequence[int]], dial: Optional[str] = None
    ) -> None:
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
            if (
                not isinstance(depth_range, (tuple, list))
                or len(depth_range) != 2
                or not all(is_int(v) for v in depth_range)
                or not 1 <= depth_range[0] <= depth_range[1]
            ):
                raise ValueError(
                    f'train_depth must be two integers (lo, hi) with 1 <= lo <= hi, got {depth_range!r}'
                )
            depth_range = (int(depth_range[0]), int(depth_range[1]))
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

    def truncate(self, num_points: int) -> None:
        """Keep the first ``num_points`` grid points: horizon num_points·h, same step length."""
        self.solver = self.solver.truncated(num_points)

    @property
    def num_time_points(self) -> int:
        """Grid points after t = 0 (the 'layers' of forward_intermediates)."""
        return self.solver.steps

    def time_points(self) -> torch.Tensor:
        """Times t_1 … t_L of the interval end points, shape (L,)."""
        return self.solver.grid()[1:]

    @property
    def nfe(self) -> int:
        """Field evaluations of the last forward (the adjoint's backward evaluations not counted)."""
        return self.shared.nfe

    def model_args(self) -> dict:
        """The solver settings as model kwargs (None = drop the kwarg)."""
        cfg = self.solver
        return dict(
            solver=cfg.method,
            steps=None if cfg.step_size else cfg.steps,
            step_size=cfg.step_size,
            t_end=cfg.t_end,
            rtol=cfg.rtol,
            atol=cfg.atol,
            adjoint=cfg.adjoint,
            check_finite=cfg.check_finite,
            solver_options=dict(cfg.options) or None,
            train_depth=list(self.train_depth) if self.train_depth else None,
        )

    # ---- timm's view: a sequence of blocks ------------------------------------------------------
    def __len__(self) -> int:
        return self.solver.steps

    def __iter__(self) -> Iterator[DepthInterval]:
        return iter([getattr(self, str(i)) for i in range(len(self))])

    def __getitem__(self, item: Union[int, slice]) -> Union[DepthInterval, 'ContinuousDepthStack']:
        if isinstance(item, slice):
            start, stop, step = item.indices(len(self))
            if start != 0 or step != 1 or stop < 1:
                raise IndexError(
                    f'a stack is cut only to its first n intervals ([:n], n <= {len(self)}), got {item}'
                )
            return self._view(stop)
        if not is_int(item) or not -len(self) <= item < len(self):
            raise IndexError(f'interval index {item!r} out of range for {len(self)} intervals')
        return getattr(self, str(range(len(self))[item]))

    def _not_editable(self, edit: str, *args):
        raise TypeError(
            f'{edit} cannot edit a ContinuousDepthStack, whose intervals are grid steps of one shared '
            'field: change the depth with set_solver(steps=N), set_iterations(N) or truncate(n)'
        )

    def add_module(self, name: str, module: Optional[nn.Module]) -> None:
        # re-adding a child as itself is what module converters do (torch's convert_sync_batchnorm, train.py --sync-bn)
        if dict(self.named_children()).get(name) is not module or module is None:
            self._not_editable(f'add_module({name!r}, ...)')

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, nn.Module) and dict(self.named_children()).get(name) is not value:
            self._not_editable(f'setting a module attribute ({name!r})')
        super().__setattr__(name, value)

    def _view(self, n: int) -> 'ContinuousDepthStack':
        """The first n intervals: the same interval modules, a truncated solver, shared counters."""
        view = ContinuousDepthStack.__new__(ContinuousDepthStack)
        nn.Module.__init__(view)
        for i in range(n):
            nn.Module.add_module(view, str(i), self[i])
        view.shared = self.shared
        view._solver = self.solver.truncated(n)
        view.grad_checkpointing = self.grad_checkpointing
        return view

    def _root(self) -> 'ContinuousDepthStack':
        return self.shared.root

    # ---- integration ----------------------------------------------------------------------------
    def _f(self, t, x: torch.Tensor) -> torch.Tensor:
        """The field at time t (a float or a 0-dim tensor)."""
        if not isinstance(t, torch.Tensor):
            t = torch.full(
                (),
                t,
                dtype=torch.float64 if x.dtype == torch.float64 else torch.float32,
                device=x.device,
            )
        if self.grad_checkpointing and torch.is_grad_enabled() and not self.solver.adjoint:
            return checkpoint(self.field, t, x, use_reentrant=False)
        return self.field(t, x)

    def _advance(self, x: torch.Tensor, i: int, cfg: SolverConfig,
                 end_only: bool = False) -> Tuple[List[torch.Tensor], int]:
        """From x = X(t_i) on ``cfg``'s grid: ([X(t_{i+1})], evaluations) for a stepped method, else the states at
        every later grid point of one ``odeint`` call (``end_only``: the last one only)."""
        if cfg.stepped:
            return [rk_step(self._f, i * cfg.h, cfg.h, x, cfg.method)], cfg.evals_per_step
        if torch.compiler.is_exporting():
            raise ValueError(
                f'{cfg.describe()} cannot be exported: only fixed-grid Runge–Kutta methods without the '
                'adjoint can, so export after set_solver(method="rk4", adjoint=False)'
            )
        stochastic = active_stochastic_modules(self.field) if cfg.adjoint or cfg.is_adaptive else []
        if stochastic:
            why = 'the adjoint backward pass re-samples the dropout masks' if cfg.adjoint else \
                f'the adaptive {cfg.method!r} would control its step size on the dropout noise'
            raise ValueError(
                f'the ODE field is random in training mode (active: {", ".join(stochastic)}) and {why}: '
                'set those drop rates to 0, use eval mode, or use adjoint=False and a fixed-grid method'
            )
        evals = []
        t = cfg.grid(x.device, torch.float64 if x.dtype == torch.float64 else torch.float32)[i:]
        try:
            states = odeint_grid(
                lambda s, z: evals.append(1) or self._f(s, z),
                x,
                t,
                cfg,
                self.field.parameters(),
                end_only,
            )
        except FloatingPointError as e:
            raise explain_non_finite(x, self.field, cfg, error=e) from None
        return list(states), len(evals)

    def _run_interval(self, x: torch.Tensor, i: int) -> torch.Tensor:
        shared = self.shared
        walk = shared.walk
        grad = torch.is_grad_enabled()
        if walk is not None and walk[0] == i and walk[1] == grad and walk[2] is x:
            states = walk[3]
            evals = 0
        else:
            states, evals = self._advance(x, i, self.solver)
        shared.walk = (i + 1, grad, states[0], states[1:]) if len(states) > 1 else None
        if shared.deferred is not None:  # walked by the stack, which sets nfe at the end
            shared.walked += evals
        else:
            shared.nfe = evals + (shared.nfe if i > 0 and shared.last_interval == i - 1 else 0)
            shared.last_interval = i
        return states[0]

    def _walk_intervals(self, x: torch.Tensor, stop: int) -> List[torch.Tensor]:
        """X(t_1) … X(t_stop) through the interval modules, the last checked once."""
        shared = self.shared
        x0 = x
        states = []
        outer = shared.deferred
        shared.walked = 0
        shared.deferred = outer if outer is not None else []  # the intervals leave the check to us
        try:
            for i in range(stop):
                x = self[i](x)
                states.append(x)
        finally:
            shared.deferred = outer
        shared.nfe = shared.walked
        shared.last_interval = None
        self.checked(x0, x)
        return states

    def checked(self, x0: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """``out`` after its finiteness check (one device sync) when ``check_finite`` is on, in eager mode; deferred
        to the owning model's check of its logits while the model's forward runs (:meth:`defer_checks`)."""
        if (
            not self.solver.check_finite
            or torch.compiler.is_compiling()
            or torch.compiler.is_exporting()
            or isinstance(out, torch.fx.Proxy)
            or out.is_meta
        ):
            return out
        if self.shared.deferred is not None:
            self.shared.deferred.append((x0, out))
        elif not bool(torch.isfinite(out.detach()).all()):
            raise explain_non_finite(x0, self.field, self.solver)
        return out

    def defer_checks(self) -> List[Tuple[torch.Tensor, torch.Tensor]]:
        """Leave the finiteness checks of final states to the caller until :meth:`end_deferred_checks`: the returned
        list collects (X(0), final state) pairs (a model checks them with its logits, one device sync)."""
        self.shared.deferred = []
        return self.shared.deferred

    def end_deferred_checks(self) -> None:
        """Check final states here again (:meth:`defer_checks`)."""
        self.shared.deferred = None

    def trajectory(self, x: torch.Tensor, indices: Sequence[int]) -> torch.Tensor:
        """States at time points ``indices`` (0-based, increasing: index i is t_{i+1}) from X(0),
        shape (len(indices), B, N, D). Integration stops at the largest index."""
        if (
            not indices
            or not 0 <= indices[0] <= indices[-1] < len(self)
            or sorted(set(indices)) != list(indices)
        ):
            raise ValueError(
                f'indices must increase within 0..{len(self) - 1}, got {list(indices)}'
            )
        if self.training and self._root().train_depth is not None:
            raise self._drawn_error('a trajectory reads the time points of')
        states = self._walk_intervals(x, indices[-1] + 1)
        return torch.stack([states[i] for i in indices])

    def forward(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None,
                is_causal: bool = False) -> torch.Tensor:
        """X(0) (B, N, D) -> X(t_L) (B, N, D)."""
        _check_no_mask(attn_mask, is_causal)
        if self.training and self.train_depth is not None:
            return self.drawn_states(x)[-1]
        cfg = self.solver
        if cfg.adjoint and cfg.evals_per_step and torch.is_grad_enabled() and not _any_hooks(self):
            # one adjoint solve that keeps only X(t_end) for backward: memory O(1) in the steps (walking the
            # intervals keeps every grid state); the intervals run when hooks on them (or global ones) are to fire
            states, self.shared.nfe = self._advance(x, 0, cfg, end_only=True)
            self.shared.last_interval = None
            return self.checked(x, states[-1])
        return self._walk_intervals(x, len(self))[-1]

    def drawn_states(self, x: torch.Tensor) -> List[torch.Tensor]:
        """Training with ``train_depth``: X(t_1) … X(t_n) on the grid of one drawn depth (n = its steps), the last
        checked; what a training forward integrates."""
        if not (self.training and self.train_depth is not None):
            raise ValueError(
                'drawn_states integrates a drawn depth: call it in training mode with train_depth set'
            )
        hooked = [str(m.index) for m in self if has_module_hooks(m)]
        if hooked:
            raise self._drawn_error(f'intervals {", ".join(hooked)} carry hooks on')
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

    def _drawn_error(self, what: str) -> ValueError:
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

    def extra_repr(self) -> str:
        drawn = (
            f', train_depth={self.train_depth[0]}..{self.train_depth[1]} {self.train_dial}'
            if self.train_depth
            else ''
        )
        return self.solver.describe() + drawn


for _name, _edit in (
    ('__setitem__', 'blocks[i] = ...'),
    ('__delitem__', 'del blocks[i]'),
    ('append', 'append'),
    # nn.Sequential's edits
    ('extend', 'extend'),
    ('insert', 'insert'),
    ('pop', 'pop'),
):
    setattr(ContinuousDepthStack, _name, lambda self, *args, _edit=_edit: self._not_editable(_edit))


def depth_stack(model: nn.Module) -> ContinuousDepthStack:
    """The :class:`ContinuousDepthStack` of a timm_odevit model or an odeified timm ViT (its ``blocks``)."""
    stack = getattr(model, 'blocks', None)
    if not isinstance(stack, ContinuousDepthStack):
        raise TypeError(
            f'{type(model).__name__} has no ODE trajectory: use an odevit_*, bvit_* or odeified model'
        )
    return stack
