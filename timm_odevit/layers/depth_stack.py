"""ContinuousDepthStack: the depth of a continuous-depth ViT, standing where a ViT's blocks stand.

One shared field, L intervals [t_i, t_{i+1}] on the solver's uniform grid t_i = i·t_end/L (or L
iterations of a recurrent block). Integrated in one call (``stack(x)``, end point only), or interval
by interval (``stack[i](x)``, what timm's ``forward_intermediates``, feature hooks and torch.fx
see): interval i maps X(t_i) to X(t_{i+1}) on the true times.
"""
import random
from typing import Iterator, List, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist
import torch.fx
from torch import nn
from torch.utils.checkpoint import checkpoint
from timm.layers import DropBlock2d, DropPath, register_notrace_module

from .recurrence import Recurrence, iterate
from .solver import SolverConfig, _steps_by_hand, solve
from .._checks import is_int

__all__ = ['ContinuousDepthStack', 'DepthInterval', 'depth_stack', 'active_stochastic_modules', 'explain_non_finite']


def active_stochastic_modules(module: nn.Module) -> List[str]:
    """Names of the submodules that make ``module`` random in its current mode: dropout with p > 0
    and drop-path / drop-block with drop_prob > 0, in training mode."""
    def active(m):
        if isinstance(m, nn.modules.dropout._DropoutNd):
            return m.training and m.p > 0
        return isinstance(m, (DropPath, DropBlock2d)) and m.training and m.drop_prob > 0
    return [name or type(module).__name__ for name, m in module.named_modules() if active(m)]


TRAIN_DIALS = ('steps', 'horizon')


def _check_no_mask(attn_mask: Optional[torch.Tensor], is_causal: bool) -> None:
    if attn_mask is not None or is_causal:
        raise ValueError('attention masks / causal attention are not supported by a continuous-depth stack: its '
                         'field attends over all tokens (call it without attn_mask / is_causal)')


def _non_finite_parameters(module: Optional[nn.Module], skip: Optional[nn.Module] = None) -> List[str]:
    if module is None:
        return []
    skipped = {id(p) for p in skip.parameters()} if skip is not None else set()
    return [name for name, p in module.named_parameters()
            if id(p) not in skipped and not p.is_meta and p.is_floating_point() and not bool(torch.isfinite(p).all())]


def explain_non_finite(error: FloatingPointError, x0: torch.Tensor, field: nn.Module,
                       model: Optional[nn.Module] = None) -> FloatingPointError:
    """The error of a non-finite ODE state, naming its cause when it is not the dynamics: a state that
    was already non-finite when it entered (input images / embedding), non-finite weights, float16
    overflow. Runs only on the error path."""
    def listed(names):
        return ', '.join(names[:4]) + (f' (+{len(names) - 4} more)' if len(names) > 4 else '')
    field_bad = _non_finite_parameters(field)
    if field_bad:
        return FloatingPointError(
            f'the ODE field\'s weights hold NaN/Inf ({listed(field_bad)}), so the dynamics are not the cause: '
            'the weights are corrupted or uninitialised (a model built on the meta device needs init_weights() after '
            'to_empty), or training diverged before this step (lower the lr, clip gradients)')
    if not bool(torch.isfinite(x0).all()):
        other_bad = _non_finite_parameters(model, skip=field)
        cause = (f'the model\'s weights hold NaN/Inf ({listed(other_bad)}): corrupted or uninitialised weights '
                 '(init_weights() after to_empty), or diverged training'
                 if other_bad else 'the input images hold NaN/Inf (check torch.isfinite(images).all())')
        return FloatingPointError(
            f'the state entering the ODE already holds NaN/Inf, so the dynamics are not the cause: {cause}')
    device = x0.device.type
    half = x0.dtype in (torch.float16, torch.bfloat16) or (
        torch.is_autocast_enabled(device) and torch.get_autocast_dtype(device) in (torch.float16, torch.bfloat16))
    if half and str(error).startswith('ODE solver failed'):  # an adaptive solve whose step size collapsed
        return FloatingPointError(
            f'{error}: the adaptive step-size control failed in half precision, whose rounding (~1e-3 in float16, '
            '~8e-3 in bfloat16) swamps the error estimate it controls on, so the step shrinks until it underflows. '
            'Integrate adaptive methods in float32 (model.float(), no half autocast), or use a '
            'fixed-grid method (e.g. set_solver(method="rk4", steps=...)) in half precision.')
    if x0.dtype == torch.float16 or (torch.is_autocast_enabled(device)
                                     and torch.get_autocast_dtype(device) == torch.float16):
        return FloatingPointError(
            str(error).split(' The dynamics blew up')[0].rstrip('.') + ', in float16 (autocast or a half model), '
            'where values above 65504 overflow: use bfloat16 (train.py --amp-dtype bfloat16) or float32. If float32 '
            'fails too, the dynamics blew up: use more steps, a stabler solver or a smaller depth scale.')
    return error


class _Stats:
    """Counters shared by a stack and its slices ``stack[:n]`` (timm runs slices in forward_intermediates)."""
    nfe = 0
    last_interval: Optional[int] = None


def _hooked(module: nn.Module) -> bool:
    return bool(module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
                or module._backward_pre_hooks)


def _global_hooks() -> bool:
    from torch.nn.modules import module as m
    return bool(m._global_forward_hooks or m._global_forward_pre_hooks or m._global_backward_hooks
                or m._global_backward_pre_hooks)


@register_notrace_module  # a leaf in torch.fx graphs: node 'blocks.i' is the state X(t_{i+1})
class DepthInterval(nn.Module):
    """Interval i of a :class:`ContinuousDepthStack`: X(t_i) (B, N, D) -> X(t_{i+1}) (B, N, D).

    Like a timm ``Block``, a pure function of its input, the current weights and the grad mode: it
    integrates [t_i, t_{i+1}] from the x it is given (one solver step of a Runge–Kutta grid, a
    restarted solve for Adams / adaptive methods, one block application of a recurrence), so hooks of
    every kind, in-place edits, ``torch.no_grad`` on some intervals and weight changes between calls
    behave as with timm's blocks. Interval 0 registers the shared field (parameters
    ``blocks.0.field.*``); the others hold no parameters, so ``requires_grad_(False)`` on
    ``blocks[0]`` freezes the field for every interval, and on another interval does nothing; so do
    ``train()`` / ``eval()`` (the field's dropout).
    Registering it under ``blocks.0`` is what lets timm's own code treat it as depth: its ViT
    ``group_matcher`` (``^blocks\.(\d+)``) puts it between stem and head for layer-wise lr decay.
    ``self.stack`` is a plain reference, not a child module.
    """

    def __init__(self, stack: 'ContinuousDepthStack', index: int, field: Optional[nn.Module] = None):
        super().__init__()
        self.__dict__['stack'] = stack
        self.index = index
        if field is not None:
            self.field = field

    def forward(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None,
                is_causal: bool = False) -> torch.Tensor:
        _check_no_mask(attn_mask, is_causal)
        stack = self.stack
        if stack is None:
            raise RuntimeError(
                f'interval {self.index} belongs to a grid that has since changed (set_solver, set_iterations, '
                'truncation or pruning): it was kept from before, e.g. by a torch.fx graph (rebuild the features_only '
                '/ create_feature_extractor model) or a saved reference (take model.blocks[i] again)')
        stack._refuse_drawn(f'interval {self.index} (a hook on it, forward_intermediates, a torch.fx graph or timm\'s '
                            'grad checkpointing of a ViT\'s blocks) steps through', self.training)
        return stack._run_interval(x, self.index)

    def extra_repr(self) -> str:
        if self.stack is None:
            return 'retired'
        h = self.stack.solver.h
        return f't=[{self.index * h:.4g}, {(self.index + 1) * h:.4g}]'


def _adopt_hooks(new: nn.Module, old: nn.Module) -> None:
    """Move every hook dict (forward, pre, backward, state-dict ...) of ``old`` to ``new``: the handles
    users hold keep working (they point at the dicts), and so do feature hooks registered by name."""
    for key, value in vars(old).items():
        if 'hook' in key and isinstance(value, (dict, set)):
            new.__dict__[key] = value


class ContinuousDepthStack(nn.Module):
    """Maps tokens X(0) (B, N, D) to X(t_L) through one shared ``field``, presented to timm as blocks.

    ``solver`` is a :class:`SolverConfig` (integrate dX/dt = field(t, X) with torchdiffeq) or a
    :class:`Recurrence` (z_k = B(z_{k−1}) with B = ``field.block``, a :class:`BlockField`); L is
    its number of grid steps (iterations). After every forward, ``nfe`` holds the field (block)
    evaluations it made: steps × stages for Runge–Kutta grids (computed, so that nothing changes
    inside the integration that torch.compile would guard on), counted for Adams / adaptive ones;
    after a walk through the intervals, their sum.

    Interval semantics: ``stack[i](x)`` integrates [t_i, t_{i+1}] from x on the true times, whatever x
    is (see :class:`DepthInterval`). For Runge–Kutta grids and the recurrence, stepping through the
    intervals gives exactly the states of one integration of the whole grid; Adams and adaptive methods
    restart at every interval (a multistep history / step size of its own), so their interval states
    agree with the one-call states within the solver's tolerance, not bit for bit. ``stack(x)``
    integrates in one call, end point only, unless something observes the intervals (hooks of any kind
    on them, global module hooks, torch.fx tracing): then it steps through them. Nothing is kept
    between calls. ``stack[:n]`` is a view of the first n intervals (horizon t_n, same step length)
    sharing the field and the interval modules (so their hooks fire there too), as slicing timm's
    ``nn.Sequential`` of blocks does. Changing the grid gives new interval modules: the hooks of the
    intervals that remain move to them, hooked intervals are never dropped silently (refused), and the
    old modules retire (a torch.fx graph traced before refuses to run). ``grad_checkpointing``
    recomputes each field (block) evaluation in backward.

    A field that is random in training mode (dropout, drop-path) is refused with the adjoint method
    (its backward pass re-samples the masks, so the gradient is not the gradient of the forward) and
    with adaptive methods (the error estimate measures the noise, so step control is meaningless).
    """

    train_depth: Optional[Tuple[int, int]] = None  # class default: slices stack[:n] train on their own grid
    train_dial: str = 'steps'

    def __init__(self, field: nn.Module, solver: Optional[Union[SolverConfig, Recurrence]] = None):
        super().__init__()
        self._modules['0'] = DepthInterval(self, 0, field)
        self.grad_checkpointing = False
        self._stats = _Stats()
        self.__dict__['_parent'] = None  # the stack a slice views
        self._evals = 0
        self.solver = solver if solver is not None else SolverConfig()

    def __prepare_scriptable__(self):
        """torch.jit.script calls this on every submodule first: say why it cannot work, instead of
        TorchScript's own error from deep inside the solver."""
        raise RuntimeError(
            'TorchScript cannot compile the ODE depth of timm_odevit models (ContinuousDepthStack): torchdiffeq\'s '
            'odeint is Python (solver objects, dict options, callbacks). Use torch.compile, torch.export or '
            'torch.fx instead (all three are tested), or run the model eagerly.')

    # ---- configuration ----------------------------------------------------------------------
    @property
    def field(self) -> nn.Module:
        """The shared vector field (registered once, as ``0.field``)."""
        return self._modules['0'].field

    @property
    def solver(self) -> Union[SolverConfig, Recurrence]:
        return self.__dict__['_solver']

    @solver.setter
    def solver(self, config: Union[SolverConfig, Recurrence]) -> None:
        if not isinstance(config, (SolverConfig, Recurrence)):
            raise TypeError(f'solver must be a SolverConfig or a Recurrence, got {type(config).__name__}')
        if isinstance(config, Recurrence) and not hasattr(self.field, 'block'):
            raise TypeError(f'a Recurrence iterates a block: the field must be a BlockField, got '
                            f'{type(self.field).__name__}')
        if self.__dict__.get('_parent') is not None:
            raise ValueError('this stack is a slice stack[:n] of a model\'s stack (its intervals are the model\'s): '
                             'change the solver of the stack itself (model.blocks, or odeify again after pruning)')
        old, intervals = self.__dict__.get('_solver'), list(self._modules.values())
        hooked = [str(m.index) for m in intervals[config.steps:] if _hooked(m)]
        if hooked:
            raise ValueError(
                f'intervals {", ".join(hooked)} carry hooks (yours, or a features_only hook wrapper\'s) and would be '
                f'dropped by {config.describe()} ({config.steps} intervals): remove the hooks first, or keep at '
                f'least {int(hooked[-1]) + 1} intervals')
        self.__dict__['_solver'] = config
        if old is not None and old != config:
            # new interval modules (the old ones retire: a torch.fx graph or a reference kept from before refuses
            # to run instead of integrating the old grid); hooks and train/eval mode move to the new ones
            field = self.field
            self._modules.clear()
            for i in range(config.steps):
                self._modules[str(i)] = interval = DepthInterval(self, i, field if i == 0 else None)
                interval.training = self.training  # new intervals past the old count too (model.eval() before)
                if i < len(intervals):
                    _adopt_hooks(interval, intervals[i])
                    interval.training = intervals[i].training
            for retired in intervals:
                retired.__dict__['stack'] = None
        else:
            for i in range(len(intervals), config.steps):
                self._modules[str(i)] = DepthInterval(self, i)
                self._modules[str(i)].training = self.training
        self._sync_owner(record=True)

    @property
    def is_recurrent(self) -> bool:
        return isinstance(self.solver, Recurrence)

    def set_solver(self, **changes) -> SolverConfig:
        """Change solver settings (method, steps, step_size, t_end, rtol, atol, adjoint, ...); returns the new config."""
        if self.is_recurrent:
            raise ValueError("set_solver applies to ODE depth (regime='ode'); this stack iterates a block "
                             '(use set_iterations)')
        self.solver = self.solver.replace(**changes)
        return self.solver

    def set_iterations(self, iterations: int) -> None:
        """Horizon [0, iterations]: recurrent iterations, or ODE time (same step length)."""
        if not is_int(iterations) or iterations < 1:
            raise ValueError(f'iterations must be an integer >= 1, got {iterations!r}')
        self.solver = self.solver.replace(**(
            {'iterations': iterations} if self.is_recurrent else {'t_end': float(iterations)}))

    def set_train_depth(self, depth_range: Optional[Sequence[int]], dial: Optional[str] = None) -> None:
        """Anytime training: every forward in training mode integrates a depth drawn uniformly from
        ``depth_range`` = (lo, hi), inclusive, with torch's global RNG; eval mode, hooks and slices use the
        configured grid. Under torch.distributed (world size > 1) every rank draws the same depths (see
        :meth:`_draw_depth`), so no rank waits for another's deeper draw. ``dial`` is what
        the depth counts: 'steps' (grid steps over the same horizon [0, t_end]: h = t_end / depth) or
        'horizon' (time span [0, depth] at the same step length; iterations of a recurrence). None turns
        it off. The draw is a Python int, so torch.compile recompiles per depth (up to hi - lo + 1 graphs)."""
        dial = self.train_dial if dial is None else dial
        if dial not in TRAIN_DIALS:
            raise ValueError(f'Unknown train depth dial {dial!r}; choose one of {TRAIN_DIALS}')
        if depth_range is not None:
            if (isinstance(depth_range, (str, bytes)) or not isinstance(depth_range, (tuple, list))
                    or len(depth_range) != 2 or not all(is_int(v) for v in depth_range)
                    or not 1 <= depth_range[0] <= depth_range[1]):
                raise ValueError(f'train_depth must be two integers (lo, hi) with 1 <= lo <= hi, got {depth_range!r}')
            depth_range = (int(depth_range[0]), int(depth_range[1]))
            for depth in range(depth_range[0], depth_range[1] + 1):  # each must make a valid grid (max_steps, h)
                self._depth_config(depth, dial)
        self.train_depth, self.train_dial = depth_range, dial
        self._sync_owner(record=True)

    def _depth_config(self, depth: int, dial: Optional[str] = None) -> Union[SolverConfig, Recurrence]:
        """The solver at ``depth`` on the training dial (see :meth:`set_train_depth`)."""
        cfg = self.solver
        if cfg.is_adaptive:
            raise ValueError(f'train_depth draws a number of grid steps; {cfg.describe()} chooses its own steps '
                             '(use a fixed-grid method, e.g. euler or rk4, or train_depth=None)')
        if self.is_recurrent:
            return cfg.replace(iterations=depth)
        if (dial or self.train_dial) == 'horizon':
            return cfg.replace(t_end=float(depth))
        return cfg.replace(steps=depth)

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
        """Field (block) evaluations of the last forward (the adjoint's backward evaluations not counted)."""
        return self._stats.nfe

    # ---- the model that holds this stack as its blocks ----------------------------------------
    def attach(self, model: nn.Module) -> 'ContinuousDepthStack':
        """Keep ``model.feature_info`` (one entry per interval, ``blocks.i``) and the model's recorded
        construction args (``model._model_args``, what timm's save_for_hf exports) in step with
        later solver changes. ``model.depth_model_args(args)``, if defined, renames the args."""
        self.__dict__['_owner'] = model
        self._sync_owner(record=False)
        return self

    def model_args(self) -> dict:
        """The solver settings as model kwargs (None = drop the kwarg)."""
        cfg, drawn = self.solver, dict(train_depth=list(self.train_depth) if self.train_depth else None)
        if self.is_recurrent:
            return dict(iterations=cfg.iterations, check_finite=cfg.check_finite, **drawn)
        return dict(solver=cfg.method, steps=None if cfg.step_size else cfg.steps, step_size=cfg.step_size,
                    t_end=cfg.t_end, rtol=cfg.rtol, atol=cfg.atol, adjoint=cfg.adjoint,
                    check_finite=cfg.check_finite, solver_options=dict(cfg.options) or None, **drawn)

    def owner_model_args(self) -> dict:
        """:meth:`model_args` as the owning model's kwargs (a bViT names the ODE horizon ``iterations``)."""
        args, owner = self.model_args(), self.__dict__.get('_owner')
        return owner.depth_model_args(args) if hasattr(owner, 'depth_model_args') else args

    def _sync_owner(self, record: bool) -> None:
        owner = self.__dict__.get('_owner')
        if owner is None or owner._modules.get('blocks') is not self:
            return
        reduction = owner.patch_embed.feat_ratio() if hasattr(owner.patch_embed, 'feat_ratio') \
            else owner.patch_embed.patch_size
        owner.feature_info = [dict(module=f'blocks.{i}', num_chs=owner.embed_dim, reduction=reduction)
                              for i in range(len(self))]
        if record:
            args = self.owner_model_args()
            recorded = dict(getattr(owner, '_model_args', {}))
            for k, v in args.items():
                if v is None:
                    recorded.pop(k, None)
                else:
                    recorded[k] = v
            owner._model_args = recorded

    # ---- timm's view: a sequence of blocks ------------------------------------------------------
    def __len__(self) -> int:
        return self.solver.steps

    def __iter__(self) -> Iterator[DepthInterval]:
        return iter([self._modules[str(i)] for i in range(len(self))])

    def __getitem__(self, item: Union[int, slice]) -> Union[DepthInterval, 'ContinuousDepthStack']:
        if isinstance(item, slice):
            start, stop, step = item.indices(len(self))
            if start != 0 or step != 1 or stop < 1:
                raise IndexError(f'a continuous-depth stack can only be cut to its first n intervals ([:n], '
                                 f'1 <= n <= {len(self)}), got {item}')
            return self._view(stop)
        if not is_int(item) or not -len(self) <= item < len(self):
            raise IndexError(f'interval index {item!r} out of range for {len(self)} intervals')
        return self._modules[str(range(len(self))[item])]

    # nn.Sequential's edits: the intervals are grid steps of one shared field, not separate blocks
    def _not_editable(self, edit: str):
        raise TypeError(
            f'{edit} cannot edit a ContinuousDepthStack: its intervals are the grid steps of one shared field, not '
            'separate blocks. Change the depth with set_solver(steps=N) / set_iterations(N) (the model\'s or the '
            'stack\'s) or truncate(n); put other modules before or after the stack')

    def __setitem__(self, index, module) -> None:
        self._not_editable('blocks[i] = ...')

    def __delitem__(self, index) -> None:
        self._not_editable('del blocks[i]')

    def append(self, module: nn.Module):
        self._not_editable('append')

    def extend(self, modules):
        self._not_editable('extend')

    def insert(self, index: int, module: nn.Module):
        self._not_editable('insert')

    def pop(self, index=-1):
        self._not_editable('pop')

    def add_module(self, name: str, module: Optional[nn.Module]) -> None:
        # re-adding a child as itself is what module converters do (torch's convert_sync_batchnorm, train.py --sync-bn)
        if self._modules.get(name) is not module or module is None:
            self._not_editable(f'add_module({name!r}, ...)')

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, nn.Module) and self._modules.get(name) is not value:
            self._not_editable(f'setting a module attribute ({name!r})')
        super().__setattr__(name, value)

    def _view(self, n: int) -> 'ContinuousDepthStack':
        """The first n intervals: the same interval modules, a truncated solver, shared counters."""
        root = self.__dict__.get('_parent') or self
        view = ContinuousDepthStack.__new__(ContinuousDepthStack)
        nn.Module.__init__(view)
        for i in range(n):
            view._modules[str(i)] = self._modules[str(i)]
        view.__dict__.update(_solver=self.solver.truncated(n), _parent=root)
        view.grad_checkpointing, view._stats, view._evals = self.grad_checkpointing, self._stats, 0
        return view

    # ---- integration ----------------------------------------------------------------------------
    def _rhs(self, t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        if self.solver.exact_evals(1) is None:  # Adams / adaptive: counted
            self._evals += 1
        if self.grad_checkpointing and torch.is_grad_enabled() and not self.solver.adjoint:
            return checkpoint(self.field, t, x, use_reentrant=False)
        return self.field(t, x)

    def _check_integrable(self) -> None:
        cfg = self.solver
        if torch.compiler.is_exporting() and not self.is_recurrent and not _steps_by_hand(cfg):
            raise ValueError(
                f'{cfg.describe()} cannot be exported: only fixed-grid Runge–Kutta methods (euler, midpoint, heun2, '
                'heun3, rk4) without the adjoint or solver options, and the recurrence, have a graph of fixed shape '
                '(Adams and adaptive methods decide their steps from the values). Export after e.g. '
                'set_solver(method="rk4", steps=6, adjoint=False)')
        if not (cfg.adjoint or cfg.is_adaptive):
            return
        stochastic = active_stochastic_modules(self.field)
        if stochastic:
            why = ('the adjoint backward pass re-samples the dropout masks, so its gradient is not the gradient '
                   'of the forward pass' if cfg.adjoint else
                   f'the adaptive {cfg.method!r} would control its step size on the dropout noise')
            raise ValueError(
                f'The ODE field is random in training mode (active: {", ".join(stochastic)}) and {why}. Set those '
                'drop rates to 0, or integrate with adjoint=False and a fixed-grid method '
                '(e.g. set_solver(method="rk4", adjoint=False)); eval mode is fine.')

    def _integrate(self, x: torch.Tensor, indices: Sequence[int], start: int = 0,
                   cfg: Optional[Union[SolverConfig, Recurrence]] = None) -> Tuple[torch.Tensor, int]:
        """States at grid indices ``indices`` (increasing, in start+1..L) from x = X(t_start) on the grid of
        ``cfg`` (default: the stack's solver): ((len(indices), B, N, D), field evaluations made)."""
        cfg = self.solver if cfg is None else cfg
        self._check_integrable()
        if self.is_recurrent:
            try:
                states = iterate(self.field.block, x, cfg, indices, start, self.grad_checkpointing)
            except FloatingPointError as e:
                raise explain_non_finite(e, x, self.field, self._owner_model()) from None
            return states, indices[-1] - start
        self._evals = 0
        try:
            states = solve(self._rhs, x, cfg, indices, adjoint_params=tuple(self.field.parameters()), start=start)
        except FloatingPointError as e:
            raise explain_non_finite(e, x, self.field, self._owner_model()) from None
        exact = cfg.exact_evals(indices[-1] - start)
        return states, exact if exact is not None else self._evals

    def _owner_model(self) -> Optional[nn.Module]:
        return (self.__dict__.get('_parent') or self).__dict__.get('_owner')

    def trajectory(self, x: torch.Tensor, indices: Sequence[int]) -> torch.Tensor:
        """States at time points ``indices`` (0-based, increasing: index i is t_{i+1}) from X(0),
        shape (len(indices), B, N, D). Integration stops at the largest index."""
        if not indices or indices[0] < 0:
            raise ValueError(f'indices must increase within 0..{len(self) - 1}, got {list(indices)}')
        self._refuse_drawn('a trajectory reads the time points of', self.training)
        states, self._stats.nfe = self._integrate(x, [i + 1 for i in indices])
        self._stats.last_interval = None
        return states

    def _refuse_drawn(self, what: str, training: bool) -> None:
        """Training with ``train_depth`` integrates a drawn grid; the configured grid's intervals / time points
        do not exist in that forward, so reading them in training mode is an error, not a silent fixed grid."""
        if training and (self.__dict__.get('_parent') or self).train_depth is not None:
            raise ValueError(
                f'train_depth draws the depth of every training forward, but {what} the configured grid '
                f'({self.solver.describe()}): in training mode, call the model (or the stack) itself; read intervals '
                '(hooks, forward_intermediates, torch.fx graphs) in eval mode, or set train_depth=None. For grad '
                'checkpointing, set blocks.grad_checkpointing = True (each field evaluation is recomputed) instead '
                'of timm\'s model.set_grad_checkpointing() on an odeified ViT')

    def _run_interval(self, x: torch.Tensor, i: int) -> torch.Tensor:
        states, evals = self._integrate(x, [i + 1], start=i)
        stats = self._stats
        stats.nfe = evals + (stats.nfe if i > 0 and stats.last_interval == i - 1 else 0)
        stats.last_interval = i
        return states[0]

    def _observed(self) -> bool:
        return _global_hooks() or any(_hooked(m) for m in self)

    def forward(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None,
                is_causal: bool = False) -> torch.Tensor:
        """X(0) (B, N, D) -> X(t_L) (B, N, D)."""
        _check_no_mask(attn_mask, is_causal)
        if isinstance(x, torch.fx.Proxy) or self._observed():
            for interval in self:
                x = interval(x)
            return x
        if self.training and self.train_depth is not None:
            cfg = self._depth_config(self._draw_depth(x.device))
            states, self._stats.nfe = self._integrate(x, [cfg.steps], cfg=cfg)
        else:
            states, self._stats.nfe = self._integrate(x, [len(self)])
        self._stats.last_interval = None
        return states[-1]

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
        shared = self.__dict__.get('_shared_draw')
        if shared is None:
            seed = torch.randint(2 ** 62, (1,), dtype=torch.int64).to(device)
            dist.broadcast(seed, src=0)
            self.__dict__['_shared_draw'] = shared = random.Random(int(seed.item()))
        return shared.randint(lo, hi)

    def extra_repr(self) -> str:
        drawn = f', train_depth={self.train_depth[0]}..{self.train_depth[1]} {self.train_dial}' if self.train_depth else ''
        return self.solver.describe() + drawn


def depth_stack(model: nn.Module) -> ContinuousDepthStack:
    """The :class:`ContinuousDepthStack` of a timm_odevit model or an odeified timm ViT (its ``blocks``)."""
    stack = getattr(model, 'blocks', None)
    if not isinstance(stack, ContinuousDepthStack):
        raise TypeError(f'{type(model).__name__} has no ODE trajectory: this needs a timm_odevit model '
                        '(odevit_*, bvit_*, vit_odeified / odeify(...))')
    return stack
