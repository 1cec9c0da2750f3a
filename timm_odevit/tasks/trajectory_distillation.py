"""Trajectory distillation: a discrete timm ViT teacher guides the student's ODE trajectory.

ODE-ViT's teacher–student framework (arXiv 2511.16501): the teacher's block outputs h_1..h_L are
treated as samples of the ODE solution X(t) at time points c_1 < … < c_L of the student's grid. A teacher
deeper than the grid (L > N) gives each of the N time points one block, the one nearest in time (the
others are not aligned); a student with ``train_depth`` is aligned afresh to the grid each training
forward draws (:func:`~timm_odevit.tasks.time_mapping.align_time_points`).

    loss = task_w · CE(student logits)            (from ``ce_start_epoch`` on)
         + distill_w · mean_k MSE(P·x_{c_k}, h_k)  (P: learned projection when widths differ)
         + attn_mass_w · L1([CLS] attention mass of the last student step, of the last teacher block)
         + jasmin_w · JaSMin(student attention over the last 85 % of the trajectory)

x / h are the teacher's pooled representation, as its own head pools it (``tokens='cls'``): the [CLS]
token for ``global_pool='token'`` teachers (the paper's choice), the mean (max, avgmax) of the patch
tokens for average-pooled teachers — with or without a [CLS] token (``global_pool='avg'`` ViTs,
Eva02, BEiT) — and the student's tokens pooled the same way; ``tokens='all'`` adds every patch
token, the teacher's patch grid interpolated to the student's.

Teachers must be timm ViT-family models (vit_*, deit_*, eva*, beit*, ...) whose
``forward_intermediates`` yields (B, N, D) tokens; the attention-mass loss reads the teacher's last
block attention with timm's ``AttentionExtract`` hooks (the softmax of its non-fused path), so RoPE,
relative position biases and q/v biases are those the teacher applies.
"""
import logging
import math
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from timm.layers import global_pool_nlc
from timm.task import TrainingTask
from timm.task.classification import resolve_classification_loss
from timm.task.distillation import DistillationTeacher
from timm.utils import AttentionExtract, unwrap_model

from ..layers import depth_stack, explicit_attention
from ..models._cfgs import image_channels
from ..models._common import embed_tokens
from .._checks import check_int, check_number
from .attention_losses import attention_mass_l1, cls_attention_mass, jasmin_loss, resample_square
from .teacher import (
    TEACHER_KINDS,
    _check_teacher_kind,
    _has_class_token,
    _teacher_pool,
    load_teacher,
)
from .time_mapping import align_time_points, check_mapping, teacher_step_distances

_logger = logging.getLogger(__name__)
TOKEN_MODES = ('cls', 'all')


def _pool(
    prefix: Optional[torch.Tensor], patches: torch.Tensor, pool: str, include_prefix: bool = False
):
    """The pooled (B, D) representation of (prefix, patch) tokens; 'token' reads the first prefix token."""
    if pool == 'token':
        return prefix[:, 0]
    x = torch.cat([prefix, patches], 1) if include_prefix and prefix is not None else patches
    return global_pool_nlc(x, pool_type=pool, num_prefix_tokens=0)


def _channels(name: str, value, student: nn.Module) -> Tuple[float, ...]:
    """The loader's per-channel ``mean`` / ``std`` (one value repeated as timm's resolve_data_config does),
    else the student's pretrained cfg's."""
    embed = getattr(student, 'patch_embed', None)
    in_chans = image_channels(student) if embed is not None else len(student.pretrained_cfg[name])
    if value is None:
        return tuple(student.pretrained_cfg[name])
    value = (value,) if isinstance(value, (int, float)) else tuple(value)
    if len(value) == 1:
        value = value * in_chans
    if (
        len(value) != in_chans
        or not all(math.isfinite(v) for v in value)
        or (name == 'std' and min(value) <= 0)
    ):
        raise ValueError(
            f'{name} must be {in_chans} finite numbers{" > 0" if name == "std" else ""}, got {value!r}'
        )
    return value


def _split(item) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """forward_intermediates item -> (patch tokens (B, M, D), prefix tokens (B, P, D) or None)."""
    return (item[0], item[1]) if isinstance(item, (tuple, list)) else (item, None)


def _num_time_points(student: nn.Module) -> int:
    """Time points of a timm_odevit model or an odeified timm ViT; TypeError for anything else."""
    try:
        return depth_stack(student).num_time_points
    except TypeError:
        raise TypeError(
            f'student {type(student).__name__} has no ODE time points to align'
        ) from None


class TrajectoryStudent(nn.Module):
    """Student + width projection; ``forward`` returns (logits, taps, states, teacher blocks, time points, grid
    points) so DDP sees one forward.

    taps: list over the aligned time points of (prefix tokens (B, P, D_t), patch tokens (B, M, D_t));
    states: the same time points' unprojected token states (B, N, D_s). On the configured grid the pairs are
    (``teacher_blocks``, ``indices``); a student with ``train_depth`` draws a grid per training forward and the
    teacher's blocks are aligned to that grid (:func:`align_time_points`, with the calibrated ``distances``).
    """

    def __init__(
        self,
        student: nn.Module,
        alignment: Tuple[List[int], List[int]],
        projection: Optional[nn.Module],
        mapping: Tuple[int, str, float],
    ):
        super().__init__()
        self.student = student
        self.projection = projection if projection is not None else nn.Identity()
        self.teacher_blocks, self.indices = (list(a) for a in alignment)
        # (L, mapping, T); measured teacher step distances
        self.mapping = mapping
        self.distances = None
        self.epochs_started = 0

    def train(self, mode: bool = True):
        if mode:
            self.epochs_started += 1  # train.py calls train() once at the start of every epoch
        return super().train(mode)

    def no_weight_decay(self):
        student = unwrap_model(self.student)
        return {'student.' + n for n in getattr(student, 'no_weight_decay', lambda: set())()}

    def forward(self, x: torch.Tensor):
        student = self.student
        stack = depth_stack(self.student)
        blocks = self.teacher_blocks
        indices = self.indices
        num_points = stack.num_time_points
        # anytime training: align to the grid drawn now
        if self.training and stack.train_depth is not None:
            drawn = stack.drawn_states(embed_tokens(student, x))
            L, mapping, temperature = self.mapping
            blocks, indices = align_time_points(L, len(drawn), mapping, self.distances, temperature)
            final = student.norm(drawn[-1])
            num_points = len(drawn)
            P = student.num_prefix_tokens
            taps = [(drawn[i][:, P:], drawn[i][:, :P]) for i in indices]
        else:
            final, taps = student.forward_intermediates(
                x, indices=indices, output_fmt='NLC', return_prefix_tokens=True
            )
        logits = student.forward_head(final)
        out = []
        states = []
        for item in taps:
            patches, prefix = _split(item)
            out.append(
                (self.projection(prefix) if prefix is not None else None, self.projection(patches))
            )
            states.append(torch.cat([prefix, patches], 1) if prefix is not None else patches)
        return logits, out, states, blocks, indices, num_points


class TrajectoryDistillationTask(TrainingTask):
    """Align a student ODE's trajectory with a discrete timm ViT teacher's block outputs.

    Args:
        student_model: a timm_odevit model (anything with forward_intermediates over time points).
        teacher_model: timm model name (pretrained), 'hf-hub:…'/'local-dir:…', or a module.
        criterion / criterion_kwargs: classification loss.
        teacher_checkpoint: local checkpoint file for a teacher given by name (:func:`teacher_from_checkpoint`).
        teacher_model_kwargs: create_model kwargs of a teacher given by name (over a checkpoint's own).
        mapping: 'uniform' | 'arclength' | 'softmax' (teacher block -> student time point).
        mapping_temperature: T of the softmax mapping (reference: 30).
        tokens: 'cls' (reference): the teacher's pooled representation, as its head pools it ([CLS] for
            global_pool='token', the mean of the patch tokens for 'avg' — Eva02, BEiT, avg-pooled ViTs),
            against the student's tokens pooled the same way; 'all': that plus every patch token.
        distill_loss_weight, task_loss_weight: λ for the trajectory and CE terms.
        ce_start_epoch: CE is off before this epoch (the reference's curriculum).
        init_student_from_teacher: copy the teacher's patch embedding, [CLS], position embedding
            (a copy, frozen; the teacher is untouched) and classifier (when shapes match).
        mean, std: the normalisation of the images the task gets (the data loader's: train.py's --mean/--std, else
            the student's pretrained cfg); the teacher sees them renormalised to its own.
        calibration_batch: images (normalised for the student) to measure teacher distances for
            'arclength'/'softmax'; defaults to the first training batch (rank 0's, broadcast).
        attn_mass_weight: weight of the L1 between [CLS] -> patch attention-mass maps (last teacher
            block vs last student step; reference λ = 0.5 inside the distillation term). The teacher's map
            comes from timm's AttentionExtract hook on its last block; teachers whose attention cannot be
            extracted that way are refused at construction.
        jasmin_weight, jasmin_k: JaSMin regulariser on the student's attention over the last 85 %
            of the trajectory (reference k: 10 free, 2 distillation).
    """

    def __init__(
            self,
            student_model: nn.Module,
            teacher_model: Union[str, nn.Module],
            criterion: Optional[nn.Module] = None,
            criterion_kwargs: Optional[Dict[str, Any]] = None,
            teacher_checkpoint: Optional[str] = None,
            mapping: str = 'uniform',
            mapping_temperature: float = 30.,
            tokens: str = 'cls',
            distill_loss_weight: Optional[float] = None,
            task_loss_weight: Optional[float] = None,
            ce_start_epoch: int = 0,
            init_student_from_teacher: bool = False,
            calibration_batch: Optional[torch.Tensor] = None,
            attn_mass_weight: float = 0.,
            jasmin_weight: float = 0.,
            jasmin_k: int = 2,
            teacher_model_kwargs: Optional[Dict[str, Any]] = None,
            mean: Optional[Tuple[float, ...]] = None,
            std: Optional[Tuple[float, ...]] = None,
            device: Optional[torch.device] = None,
            dtype: Optional[torch.dtype] = None,
            verbose: bool = True,
    ):
        super().__init__(device=device, dtype=dtype, verbose=verbose)
        mapping_temperature = check_mapping(mapping, mapping_temperature)
        if tokens not in TOKEN_MODES:
            raise ValueError(f'Unknown tokens {tokens!r}; choose one of {TOKEN_MODES}')
        self.task_loss_weight = (
            1.0 if task_loss_weight is None else check_number('task_loss_weight', task_loss_weight)
        )
        if distill_loss_weight is None and self.task_loss_weight > 1:
            raise ValueError(
                f'task_loss_weight={task_loss_weight!r} > 1 makes the default distill_loss_weight '
                '(1 - task_loss_weight) negative: give distill_loss_weight explicitly'
            )
        self.distill_loss_weight = check_number(
            'distill_loss_weight',
            1.0 - (task_loss_weight or 0.0) if distill_loss_weight is None else distill_loss_weight,
        )
        self.attn_mass_weight = check_number('attn_mass_weight', attn_mass_weight)
        self.jasmin_weight = check_number('jasmin_weight', jasmin_weight)
        # the rank compared with the top probability (reference: 2, 10 free)
        check_int('jasmin_k', jasmin_k, 2)
        ce_start_epoch = check_int('ce_start_epoch', ce_start_epoch, 0)
        student = unwrap_model(student_model)
        num_points = _num_time_points(student)
        num_tokens = getattr(getattr(student, 'patch_embed', None), 'num_patches', None)
        if (
            jasmin_weight
            and num_tokens is not None
            and jasmin_k > num_tokens + student.num_prefix_tokens
        ):
            raise ValueError(
                f'jasmin_k={jasmin_k} exceeds the student\'s {num_tokens + student.num_prefix_tokens} '
                'tokens (attention row length)'
            )
        teacher = load_teacher(
            teacher_model,
            teacher_checkpoint,
            num_classes=student.num_classes,
            device=self.device,
            model_kwargs=teacher_model_kwargs,
        )
        self.teacher = DistillationTeacher(teacher, device=self.device, dtype=self.dtype)
        # the size the teacher was built for
        size = getattr(getattr(teacher, 'patch_embed', None), 'img_size', None)
        size = size or (
            teacher.pretrained_cfg['input_size'][-2:]
            if hasattr(teacher, 'pretrained_cfg')
            else None
        )
        self.teacher_input_size = None if size is None else tuple(size)
        self.num_teacher_blocks = _check_teacher_kind(teacher)
        self.teacher_has_cls = _has_class_token(teacher)
        self.teacher_pool = _teacher_pool(teacher)
        self.pool_include_prefix = self.teacher_pool != 'token' and bool(
            getattr(teacher, 'pool_include_prefix', False)
        )
        if self.teacher_pool == 'token' and not _has_class_token(student):
            raise ValueError(
                f'the teacher {type(teacher).__name__} classifies from its [CLS] token but the student '
                'has none to align with it: build the student with class_token=True'
            )
        self.mapping = mapping
        self.mapping_temperature = mapping_temperature
        self.tokens = tokens
        self.criterion = resolve_classification_loss(
            criterion, self.device, criterion_kwargs=criterion_kwargs
        )
        self.ce_start_epoch = ce_start_epoch
        self.jasmin_k = jasmin_k
        self._teacher_attn = None
        if attn_mass_weight:
            if not (self.teacher_has_cls and getattr(student, 'has_class_token', False)):
                raise ValueError(
                    'the attention-mass loss needs a [CLS] token in teacher and student'
                )
            self._teacher_attn = self._attention_extract(teacher)

        alignment = align_time_points(self.num_teacher_blocks, num_points)
        for name, value in (('mean', mean), ('std', std)):  # of the images the task gets
            self.register_buffer(
                f'student_{name}',
                torch.tensor(_channels(name, value, student), device=self.device).view(1, -1, 1, 1),
                persistent=False,
            )
        self._probe_teacher(teacher)
        t_dim = teacher.embed_dim
        s_dim = student.embed_dim
        projection = (
            nn.Linear(s_dim, t_dim, device=self.device, dtype=self.dtype)
            if t_dim != s_dim
            else None
        )
        if init_student_from_teacher:
            self._init_student(student, teacher)
        self.trainable_module = TrajectoryStudent(
            student_model,
            alignment,
            projection,
            (self.num_teacher_blocks, mapping, self.mapping_temperature),
        )
        self.calibrated = mapping == 'uniform'
        if calibration_batch is not None and not self.calibrated:
            self.calibrate(calibration_batch)

        if verbose:
            aligned = '[CLS] token' if self.teacher_pool == 'token' else \
                f'{self.teacher_pool}-pooled {"" if self.pool_include_prefix else "patch "}tokens'
            _logger.info(
                f'TrajectoryDistillationTask: {self.num_teacher_blocks} teacher blocks -> {num_points} '
                f'student time points ({mapping}), tokens={tokens}, projection={projection is not None}; '
                f'aligning the teacher\'s {aligned} (global_pool={getattr(teacher, "global_pool", None)!r}) '
                f'with the student\'s {aligned}'
            )

    # ---- set-up -------------------------------------------------------------------------------
    @staticmethod
    @torch.no_grad()
    def _init_student(student: nn.Module, teacher: nn.Module) -> None:
        """Copy (not share) the teacher's patch embedding, [CLS] and position embedding, frozen; and
        its classifier when the shapes match."""
        copied = []
        for name in ('patch_embed', 'cls_token', 'pos_embed'):
            s_obj = getattr(student, name, None)
            t_obj = getattr(teacher, name, None)
            if s_obj is None or t_obj is None:
                continue
            s_state, t_state = (
                {'': o} if isinstance(o, torch.Tensor) else o.state_dict() for o in (s_obj, t_obj)
            )
            shapes = [{k: tuple(v.shape) for k, v in state.items()} for state in (s_state, t_state)]
            if shapes[0] != shapes[1]:
                raise ValueError(
                    f'cannot initialise the student {name} from the teacher, whose shapes differ '
                    f'({shapes[0]} vs {shapes[1]}): build the student like the teacher, or do not init it'
                )
            for k in s_state:
                s_state[k].copy_(t_state[k])
            s_obj.requires_grad_(False)
            copied.append(name)
        s_head = student.get_classifier()
        t_head = teacher.get_classifier()
        if (
            isinstance(s_head, nn.Linear)
            and isinstance(t_head, nn.Linear)
            and s_head.weight.shape == t_head.weight.shape
        ):
            s_head.load_state_dict(t_head.state_dict())
            copied.append('head')
        _logger.info(f'student initialised from the teacher: {copied} (embeddings frozen)')

    @staticmethod
    def _attention_extract(teacher: nn.Module):
        """(last block's attention module, timm AttentionExtract hooks on its softmax output, hook name)."""
        blocks = getattr(teacher, 'blocks', None)
        name = (
            f'blocks.{len(blocks) - 1}.attn'
            if isinstance(blocks, (nn.Sequential, nn.ModuleList))
            else None
        )
        modules = dict(teacher.named_modules())
        if name is None or f'{name}.attn_drop' not in modules:
            raise TypeError(
                f"cannot extract the attention of teacher {type(teacher).__name__}: timm's AttentionExtract "
                f'hooks blocks[-1].attn.attn_drop; use attn_mass_weight=0 or one of the {TEACHER_KINDS}'
            )
        extract = AttentionExtract(teacher, names=[f'{name}.attn_drop'], method='hook')
        return modules[name], extract.hooks, f'{name}.attn_drop'

    def _teacher_attention(self, device) -> Optional[torch.Tensor]:
        """The softmax probabilities (B, H, N, N) of the teacher's last block in the latest teacher forward."""
        _, hooks, name = self._teacher_attn
        return hooks.get_output(device).get(name)

    @torch.no_grad()
    def _probe_teacher(self, teacher: nn.Module) -> None:
        """One forward at construction: refuse, before training, teachers whose intermediates are not
        (B, N, embed_dim) tokens or whose attention cannot be extracted."""
        param = next(teacher.parameters(), None)
        if self.teacher_input_size is None or param is None or param.is_meta:
            return
        x = torch.zeros(
            1, self.student_mean.shape[1], *self.teacher_input_size, device=param.device
        )
        name = type(teacher).__name__
        P = teacher.num_prefix_tokens
        D = teacher.embed_dim
        L = self.num_teacher_blocks
        try:
            states = self._teacher_states(x)
        except (
            TypeError,
            ValueError,
            RuntimeError,
            AssertionError,
            AttributeError,
            NotImplementedError,
        ) as e:
            raise TypeError(
                f'teacher {name} cannot provide token intermediates: its forward_intermediates failed '
                f'({type(e).__name__}: {e}); trajectory distillation works with {TEACHER_KINDS}'
            ) from e
        shapes = [(None if p is None else tuple(p.shape), tuple(s.shape)) for p, s in states]
        if len(states) != L or any(len(s) != 3 or s[-1] != D or (p is None) != (P == 0)
                                   or (p is not None and p[1:] != (P, D)) for p, s in shapes):
            raise TypeError(
                f'teacher {name} forward_intermediates does not yield {L} (B, N, {D}) token tensors with '
                f'{P} prefix tokens (got {shapes}); use one of the {TEACHER_KINDS}'
            )
        if self._teacher_attn is not None:
            attn, _, hook = self._teacher_attn
            probs = self._teacher_attention(states[-1][1].device)
            N = P + shapes[-1][1][1]
            H = getattr(attn, 'num_heads', None)
            if (
                probs is None
                or probs.dim() != 4
                or probs.shape[2:] != (N, N)
                or H not in (None, probs.shape[1])
                or (probs < 0).any()
                or (probs.sum(-1) - 1).abs().max() > 1e-3
            ):
                got = 'never fired (the attention always runs fused)' if probs is None else \
                    f'gave {tuple(probs.shape)}, not softmax probabilities (1, {H}, {N}, {N})'
                raise TypeError(
                    f'cannot extract the attention of teacher {name} faithfully: timm\'s AttentionExtract '
                    f'hook on {hook} {got}; use attn_mass_weight=0 or one of the {TEACHER_KINDS}'
                )

    def _teacher_input(self, x: torch.Tensor) -> torch.Tensor:
        x = self.teacher.normalize_input(x, self.student_mean, self.student_std)
        if self.teacher_input_size is not None and tuple(x.shape[-2:]) != self.teacher_input_size:
            x = F.interpolate(x, size=self.teacher_input_size, mode='bicubic', align_corners=False)
        return x

    @torch.no_grad()
    def _teacher_states(self, x: torch.Tensor) -> List[Tuple[Optional[torch.Tensor], torch.Tensor]]:
        """(prefix, patch) tokens of every teacher block; with the attention-mass loss the last block runs
        its non-fused attention path so that AttentionExtract's hook sees the softmax."""
        with explicit_attention(
            self._teacher_attn[0] if self._teacher_attn is not None else nn.Identity()
        ):
            items = self.teacher.model.forward_intermediates(
                self._teacher_input(x), indices=self.num_teacher_blocks, output_fmt='NLC',
                return_prefix_tokens=True, intermediates_only=True)
        return [(p, s) for s, p in map(_split, items)]

    def _targets(self, state) -> torch.Tensor:
        """The vector compared per time point: the teacher's tokens pooled as its head pools them."""
        return _pool(*state, self.teacher_pool, self.pool_include_prefix)

    @torch.no_grad()
    def calibrate(self, x: torch.Tensor) -> List[int]:
        """Measure the teacher's step distances on ``x`` and align its blocks with the student's time points."""
        trainable = unwrap_model(self.trainable_module)
        if self.mapping != 'uniform':
            distances = torch.tensor(
                teacher_step_distances([self._targets(s) for s in self._teacher_states(x)]),
                device=x.device,
                dtype=torch.float64,
            )
            if dist.is_available() and dist.is_initialized():
                dist.broadcast(distances, src=0)  # every rank aligns to the same time points
            trainable.distances = distances.tolist()
            trainable.teacher_blocks, trainable.indices = align_time_points(
                self.num_teacher_blocks,
                _num_time_points(trainable.student),
                self.mapping,
                trainable.distances,
                self.mapping_temperature,
            )
            if self.verbose:
                _logger.info(
                    f'calibrated {self.mapping} mapping: distances {[round(d, 3) for d in trainable.distances]}'
                    f' -> teacher blocks {trainable.teacher_blocks} at student time points {trainable.indices}'
                )
        self.calibrated = True
        return trainable.indices

    # ---- timm TrainingTask API -------------------------------------------------------------
    @property
    def student_indices(self) -> List[int]:
        return unwrap_model(self.trainable_module).indices

    def train(self, mode: bool = True) -> 'TrajectoryDistillationTask':
        super().train(mode)
        self.teacher.eval()
        return self

    def prepare_distributed(
        self, device_ids: Optional[list] = None, **ddp_kwargs
    ) -> 'TrajectoryDistillationTask':
        from torch.nn.parallel import DistributedDataParallel as DDP
        self.teacher.requires_grad_(False)
        self.trainable_module = DDP(self.trainable_module, device_ids=device_ids, **ddp_kwargs)
        return self

    def compile(
        self, backend: str = 'inductor', mode: Optional[str] = None, **compile_kwargs
    ) -> nn.Module:
        """``torch.compile`` the student's training forward (with the projection) and its eval forward, before
        DDP wrapping (train.py's --torchcompile); the teacher's intermediates and attention hook run eagerly."""
        student = unwrap_model(self.trainable_module).student
        self.eval_model = torch.compile(student, backend=backend, mode=mode, **compile_kwargs)
        self.trainable_module = torch.compile(
            self.trainable_module, backend=backend, mode=mode, **compile_kwargs
        )
        return self.eval_model

    def get_eval_model(
        self, module: Optional[nn.Module] = None, ema: bool = False
    ) -> Optional[nn.Module]:
        resolved = super().get_eval_model(module=module, ema=ema)
        inner = unwrap_model(resolved) if resolved is not None else None
        return inner.student if isinstance(inner, TrajectoryStudent) else resolved

    def get_task_state(
        self, module: Optional[nn.Module] = None, ema: bool = False
    ) -> Dict[str, Any]:
        module = module if module is not None else self.get_trainable_module(ema=ema)
        if module is None:
            return {}
        trainable = unwrap_model(module)
        return {'projection': trainable.projection.state_dict(), 'indices': list(trainable.indices),
                'teacher_blocks': list(trainable.teacher_blocks), 'distances': trainable.distances,
                'epochs_started': trainable.epochs_started}

    def load_task_state(
        self, state, strict: bool = True, module: Optional[nn.Module] = None, ema: bool = False
    ):
        if not state:
            return
        module = module if module is not None else self.get_trainable_module(ema=ema)
        trainable = unwrap_model(module)
        trainable.projection.load_state_dict(state.get('projection', {}), strict=strict)
        trainable.indices = list(state['indices'])
        trainable.teacher_blocks = list(state.get('teacher_blocks', range(len(trainable.indices))))
        trainable.distances = state.get('distances')
        trainable.epochs_started = state.get('epochs_started', trainable.epochs_started)
        self.calibrated = True

    def get_clip_parameters(self, exclude_head: bool = False):
        return [p for p in unwrap_model(self.trainable_module).parameters() if p.requires_grad]

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> Dict[str, torch.Tensor]:
        if not self.calibrated:
            self.calibrate(input)
        outputs = self.trainable_module(input)
        logits, student_states, raw_states, blocks, indices, num_points = outputs
        teacher_states = self._teacher_states(input)
        kd_losses = []
        for (s_prefix, s_patches), t_state in zip(
            student_states, [teacher_states[k] for k in blocks]
        ):
            # pooled as the teacher
            pooled = _pool(s_prefix, s_patches, self.teacher_pool, self.pool_include_prefix)
            kd = F.mse_loss(pooled, self._targets(t_state))
            if self.tokens == 'all':
                t_patches = t_state[1]
                # the teacher's patch grid -> the student's
                if t_patches.shape[1] != s_patches.shape[1]:
                    t_patches = resample_square(
                        t_patches.transpose(1, 2), s_patches.shape[1], 'bilinear'
                    )
                    t_patches = t_patches.transpose(1, 2)
                kd = kd + F.mse_loss(s_patches, t_patches)
            kd_losses.append(kd)
        kd_loss = torch.stack(kd_losses).mean()
        task_loss = self.criterion(logits, target)
        epoch = max(unwrap_model(self.trainable_module).epochs_started - 1, 0)
        task_weight = self.task_loss_weight if epoch >= self.ce_start_epoch else 0.
        loss = task_weight * task_loss + self.distill_loss_weight * kd_loss
        result = {'loss': loss, 'output': logits, 'task_loss': task_loss, 'kd_loss': kd_loss}
        if self.attn_mass_weight or self.jasmin_weight:
            student = unwrap_model(self.trainable_module).student
            field = depth_stack(student).field
            if self.attn_mass_weight:
                prefix, patches = teacher_states[-1]
                t_mass = cls_attention_mass(
                    self._teacher_attention(patches.device), prefix.shape[1]
                )
                s_mass = cls_attention_mass(
                    field.attention_probs(raw_states[-1]), student.num_prefix_tokens
                )
                result['attn_mass_loss'] = attention_mass_l1(s_mass, t_mass)
                result['loss'] = result['loss'] + self.attn_mass_weight * result['attn_mass_loss']
            if self.jasmin_weight:
                late = [z for i, z in zip(indices, raw_states) if (i + 1) / num_points >= 0.15]
                result['jasmin_loss'] = torch.stack(
                    [jasmin_loss(field.attention_probs(z), self.jasmin_k) for z in late]).mean()
                result['loss'] = result['loss'] + self.jasmin_weight * result['jasmin_loss']
        return result
