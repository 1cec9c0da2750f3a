"""ContinuousDepthStack: the depth of a continuous-depth ViT, standing where a ViT's blocks stand.

One shared field over the L intervals [t_i, t_{i+1}] of the solver's uniform grid (:mod:`.solver`). The stack is a
sequence of interval modules, as timm's ``blocks`` are, and its forward runs them in a loop, as timm's
``forward_intermediates``, feature hooks and torch.fx graphs do: interval i maps X(t_i) to X(t_{i+1}) on the true
times, so hooks on an interval fire wherever the depth is integrated.
"""
import contextlib
from typing import Iterator, List, Optional, Sequence, Tuple, Union

import torch
import torch.fx
from torch import nn
from torch.utils.checkpoint import checkpoint

from .._checks import is_int
from .._compat import has_module_hooks
from .depth_interval import DepthInterval, SharedDepthState
from .diagnostics import active_stochastic_modules, any_hooks, check_no_mask, explain_non_finite
from .solver import SolverConfig
from .stepping import odeint_grid, rk_step
from .train_depth import DrawnDepth


class ContinuousDepthStack(DrawnDepth, nn.Module):
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
            raise TypeError(f'solver must be a SolverConfig, got {type(config).__name__}: build a SolverConfig()')
        if self.shared.root is not self:
            raise ValueError("this stack is a slice stack[:n]: change the solver of the model's stack (model.blocks)")
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

    def truncate(self, num_points: int) -> None:
        """Keep the first ``num_points`` grid points: horizon num_points·h, same step length."""
        self.solver = self.solver.truncated(num_points)

    @property
    def num_time_points(self) -> int:
        """Grid points after t = 0 (the 'layers' of forward_intermediates)."""
        return self.solver.steps

    @property
    def nfe(self) -> int:
        """Field evaluations of the last forward (the adjoint's backward evaluations not counted)."""
        return self.shared.nfe

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

    def _f(self, t, x: torch.Tensor) -> torch.Tensor:
        """The field at time t (a float or a 0-dim tensor)."""
        if not isinstance(t, torch.Tensor):
            t = torch.tensor(t, dtype=torch.promote_types(x.dtype, torch.float32), device=x.device)  # as the grid
        if self.grad_checkpointing and torch.is_grad_enabled() and not self.solver.adjoint:
            return checkpoint(self.field, t, x, use_reentrant=False)
        return self.field(t, x)

    def _advance(
            self,
            x: torch.Tensor,
            i: int,
            cfg: SolverConfig,
            end_only: bool = False,
    ) -> Tuple[List[torch.Tensor], int]:
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
        evals = 0

        def counted_f(t, z):
            nonlocal evals
            evals += 1
            return self._f(t, z)

        t = cfg.grid(x.device, torch.promote_types(x.dtype, torch.float32))[i:]  # float64 for a float64 state
        try:
            states = odeint_grid(counted_f, x, t, cfg, self.field.parameters(), end_only)
        except FloatingPointError as e:
            raise explain_non_finite(x, self.field, cfg, error=e) from None
        return list(states), evals

    def run_interval(self, x: torch.Tensor, i: int) -> torch.Tensor:
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
        to the owning model's check of its logits while the model's forward runs (:meth:`deferred_checks`)."""
        traced = torch.compiler.is_compiling() or torch.compiler.is_exporting() or isinstance(out, torch.fx.Proxy)
        if not self.solver.check_finite or traced or out.is_meta:
            return out
        if self.shared.deferred is not None:
            self.shared.deferred.append((x0, out))
        elif not bool(torch.isfinite(out.detach()).all()):
            raise explain_non_finite(x0, self.field, self.solver)
        return out

    @contextlib.contextmanager
    def deferred_checks(self) -> Iterator[List[Tuple[torch.Tensor, torch.Tensor]]]:
        """Leave the finiteness checks of final states to the caller inside the block: the list it yields collects
        (X(0), final state) pairs (a model checks them with its logits, one device sync)."""
        self.shared.deferred = []
        try:
            yield self.shared.deferred
        finally:
            self.shared.deferred = None

    def trajectory(self, x: torch.Tensor, indices: Sequence[int]) -> torch.Tensor:
        """States at time points ``indices`` (0-based, increasing: index i is t_{i+1}) from X(0),
        shape (len(indices), B, N, D). Integration stops at the largest index."""
        increasing = indices and sorted(set(indices)) == list(indices)
        if not increasing or not 0 <= indices[0] <= indices[-1] < len(self):
            raise ValueError(f'indices must increase within 0..{len(self) - 1}, got {list(indices)}')
        if self.training and self.shared.root.train_depth is not None:
            raise self.drawn_error('a trajectory reads the time points of')
        states = self._walk_intervals(x, indices[-1] + 1)
        return torch.stack([states[i] for i in indices])

    def forward(
            self,
            x: torch.Tensor,
            attn_mask: Optional[torch.Tensor] = None,
            is_causal: bool = False,
    ) -> torch.Tensor:
        """X(0) (B, N, D) -> X(t_L) (B, N, D)."""
        check_no_mask(attn_mask, is_causal)
        if self.training and self.train_depth is not None:
            return self.drawn_states(x)[-1]
        cfg = self.solver
        if cfg.adjoint and cfg.evals_per_step and torch.is_grad_enabled() and not any_hooks(self):
            # one adjoint solve that keeps only X(t_end) for backward: memory O(1) in the steps (walking the
            # intervals keeps every grid state); the intervals run when hooks on them (or global ones) are to fire
            states, self.shared.nfe = self._advance(x, 0, cfg, end_only=True)
            self.shared.last_interval = None
            return self.checked(x, states[-1])
        return self._walk_intervals(x, len(self))[-1]

    def extra_repr(self) -> str:
        if self.train_depth is None:
            return self.solver.describe()
        return f'{self.solver.describe()}, train_depth={self.train_depth[0]}..{self.train_depth[1]} {self.train_dial}'


def depth_stack(model: nn.Module) -> ContinuousDepthStack:
    """The :class:`ContinuousDepthStack` of a timm_odevit model or an odeified timm ViT (its ``blocks``)."""
    stack = getattr(model, 'blocks', None)
    if not isinstance(stack, ContinuousDepthStack):
        raise TypeError(
            f'{type(model).__name__} has no ODE trajectory: use an odevit_*, bvit_* or odeified model'
        )
    return stack
