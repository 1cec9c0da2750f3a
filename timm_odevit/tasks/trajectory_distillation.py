"""Trajectory distillation: a discrete timm ViT teacher guides the student's ODE trajectory.

ODE-ViT's teacher–student framework (arXiv 2511.16501): the teacher's block outputs h_1..h_L are
treated as samples of the ODE solution X(t) at time points c_1 < … < c_L of the student's grid.

    loss = task_w · CE(student logits)            (from ``ce_start_epoch`` on)
         + distill_w · mean_k MSE(P·x_{c_k}, h_k)  (P: learned projection when widths differ)
         + attn_mass_w · L1([CLS] attention mass of the last student step, of the last teacher block)
         + jasmin_w · JaSMin(student attention over the last 85 % of the trajectory)

x / h are the [CLS] tokens (``tokens='cls'``, the paper's choice), or [CLS] + patch tokens with
the teacher's patch grid interpolated to the student's (``tokens='all'``). Teachers without a
class token (global-average-pooled ViTs) are aligned on pooled patch tokens instead.
"""
import logging
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from timm.models import create_model
from timm.task import TrainingTask
from timm.task.classification import resolve_classification_loss
from timm.task.distillation import DistillationTeacher
from timm.utils import unwrap_model

from .attention_losses import attention_mass_l1, cls_attention_mass, jasmin_loss
from .time_mapping import MAPPINGS, map_teacher_to_student, teacher_step_distances

_logger = logging.getLogger(__name__)
TOKEN_MODES = ('cls', 'all')


def _has_class_token(model: nn.Module) -> bool:
    return bool(getattr(model, 'has_class_token', getattr(model, 'cls_token', None) is not None))


def _split(item) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """forward_intermediates item -> (patch tokens (B, M, D), prefix tokens (B, P, D) or None)."""
    return (item[0], item[1]) if isinstance(item, (tuple, list)) else (item, None)


def _num_time_points(student: nn.Module) -> int:
    """Time points of a timm_odevit model or an odeified timm ViT; TypeError for anything else."""
    from ..analysis import _depth
    if not callable(getattr(student, 'forward_intermediates', None)):
        raise TypeError(f'student {type(student).__name__} has no forward_intermediates()')
    try:
        return _depth(student).num_time_points
    except TypeError:
        raise TypeError(f'student {type(student).__name__} has no ODE time points to align') from None


def load_teacher(
        teacher: Union[str, nn.Module],
        checkpoint: Optional[str] = None,
        num_classes: Optional[int] = None,
        device=None,
) -> nn.Module:
    """A frozen timm ViT teacher: a model name (its pretrained weights), 'hf-hub:…' / 'local-dir:…',
    a name plus a local ``checkpoint`` file, or a module."""
    if isinstance(teacher, nn.Module):
        model = teacher
    elif checkpoint is not None:
        model = _teacher_from_checkpoint(teacher, checkpoint)
    else:
        kwargs: Dict[str, Any] = {'pretrained': True}
        if num_classes is not None:
            kwargs['num_classes'] = num_classes
        model = create_model(teacher, **kwargs)
    if not callable(getattr(unwrap_model(model), 'forward_intermediates', None)):
        raise TypeError(f'teacher {type(unwrap_model(model)).__name__} has no forward_intermediates(): trajectory '
                        'distillation needs the block outputs of a timm ViT')
    model.requires_grad_(False)
    return model.eval().to(device) if device is not None else model.eval()


def _teacher_from_checkpoint(name: str, checkpoint: str) -> nn.Module:
    """Build ``name`` and load ``checkpoint`` strictly (timm's file overlay loads non-strictly and
    would leave a wrong-architecture teacher half-initialised)."""
    import os
    from timm.models import load_state_dict
    if not os.path.isfile(checkpoint):
        raise FileNotFoundError(f'teacher checkpoint {checkpoint!r} does not exist')
    state = load_state_dict(checkpoint)
    probe = create_model(name, pretrained=False, device='meta')
    head = probe.pretrained_cfg.get('classifier', 'head')
    head = head[0] if isinstance(head, (tuple, list)) else head
    num_classes = state[f'{head}.weight'].shape[0] if f'{head}.weight' in state else 0
    model = create_model(name, pretrained=False, num_classes=num_classes)
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as e:  # shape mismatches
        raise ValueError(f'teacher checkpoint {checkpoint!r} does not fit architecture {name!r}: {e}') from e
    if missing or unexpected:
        raise ValueError(f'teacher checkpoint {checkpoint!r} does not fit architecture {name!r}: '
                         f'{len(missing)} missing keys (e.g. {missing[:3]}), '
                         f'{len(unexpected)} unexpected keys (e.g. {unexpected[:3]})')
    return model


class TrajectoryStudent(nn.Module):
    """Student + width projection; ``forward`` returns (logits, taps) so DDP sees one forward.

    taps: list over the mapped time points of (prefix tokens (B, P, D_t), patch tokens (B, M, D_t));
    states: the same time points' unprojected token states (B, N, D_s).
    """

    def __init__(self, student: nn.Module, indices: List[int], projection: Optional[nn.Module]):
        super().__init__()
        self.student = student
        self.projection = projection if projection is not None else nn.Identity()
        self.indices = list(indices)
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
        final, taps = student.forward_intermediates(
            x, indices=self.indices, output_fmt='NLC', return_prefix_tokens=True)
        logits = student.forward_head(final)
        out, states = [], []
        for item in taps:
            patches, prefix = _split(item)
            out.append((self.projection(prefix) if prefix is not None else None, self.projection(patches)))
            states.append(torch.cat([prefix, patches], 1) if prefix is not None else patches)
        return logits, out, states


class TrajectoryDistillationTask(TrainingTask):
    """Align a student ODE's trajectory with a discrete timm ViT teacher's block outputs.

    Args:
        student_model: a timm_odevit model (anything with forward_intermediates over time points).
        teacher_model: timm model name (pretrained), 'hf-hub:…'/'local-dir:…', or a module.
        criterion / criterion_kwargs: classification loss.
        teacher_checkpoint: local checkpoint file for a teacher given by name.
        mapping: 'uniform' | 'arclength' | 'softmax' (teacher block -> student time point).
        mapping_temperature: T of the softmax mapping (reference: 30).
        tokens: 'cls' (reference) or 'all'.
        distill_loss_weight, task_loss_weight: λ for the trajectory and CE terms.
        ce_start_epoch: CE is off before this epoch (the reference's curriculum).
        init_student_from_teacher: copy the teacher's patch embedding, [CLS], position embedding
            (a copy, frozen; the teacher is untouched) and classifier (when shapes match).
        calibration_batch: images (normalised for the student) to measure teacher distances for
            'arclength'/'softmax'; defaults to the first training batch (rank 0's, broadcast).
        attn_mass_weight: weight of the L1 between [CLS] -> patch attention-mass maps (last teacher
            block vs last student step; reference λ = 0.5 inside the distillation term).
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
            device: Optional[torch.device] = None,
            dtype: Optional[torch.dtype] = None,
            verbose: bool = True,
    ):
        super().__init__(device=device, dtype=dtype, verbose=verbose)
        if mapping not in MAPPINGS:
            raise ValueError(f'Unknown mapping {mapping!r}; choose one of {MAPPINGS}')
        if tokens not in TOKEN_MODES:
            raise ValueError(f'Unknown tokens {tokens!r}; choose one of {TOKEN_MODES}')
        student = unwrap_model(student_model)
        num_points = _num_time_points(student)
        teacher = load_teacher(teacher_model, teacher_checkpoint, num_classes=student.num_classes, device=self.device)
        self.teacher = DistillationTeacher(teacher, device=self.device, dtype=self.dtype)
        self.teacher_input_size = tuple(teacher.pretrained_cfg['input_size'][-2:]) \
            if hasattr(teacher, 'pretrained_cfg') else None
        self.num_teacher_blocks = len(teacher.feature_info)
        self.teacher_has_cls = _has_class_token(teacher)
        self.mapping, self.mapping_temperature, self.tokens = mapping, mapping_temperature, tokens
        self.criterion = resolve_classification_loss(criterion, self.device, criterion_kwargs=criterion_kwargs)
        if distill_loss_weight is None and task_loss_weight is not None:
            distill_loss_weight = 1. - task_loss_weight
        self.distill_loss_weight = 1. if distill_loss_weight is None else distill_loss_weight
        self.task_loss_weight = 1. if task_loss_weight is None else task_loss_weight
        self.ce_start_epoch = ce_start_epoch
        self.attn_mass_weight, self.jasmin_weight, self.jasmin_k = attn_mass_weight, jasmin_weight, jasmin_k
        if attn_mass_weight:
            if not (self.teacher_has_cls and getattr(student, 'has_class_token', False)):
                raise ValueError('the attention-mass loss needs a [CLS] token in teacher and student')
            last = getattr(teacher, 'blocks', [None])[-1]
            if self.num_teacher_blocks < 2 or not hasattr(last, 'attn') or not hasattr(last, 'norm1'):
                raise TypeError('the attention-mass loss needs a teacher with >= 2 timm ViT blocks (attn, norm1)')

        indices = map_teacher_to_student(self.num_teacher_blocks, num_points, 'uniform')  # validates L <= N
        t_dim, s_dim = teacher.embed_dim, student.embed_dim
        projection = nn.Linear(s_dim, t_dim, device=self.device, dtype=self.dtype) if t_dim != s_dim else None
        if init_student_from_teacher:
            self._init_student(student, teacher)
        self.trainable_module = TrajectoryStudent(student_model, indices, projection)
        mean = torch.tensor(student.pretrained_cfg['mean'], device=self.device).view(1, -1, 1, 1)
        std = torch.tensor(student.pretrained_cfg['std'], device=self.device).view(1, -1, 1, 1)
        self.register_buffer('student_mean', mean, persistent=False)
        self.register_buffer('student_std', std, persistent=False)
        self.calibrated = mapping == 'uniform'
        if calibration_batch is not None and not self.calibrated:
            self.calibrate(calibration_batch)

        if verbose:
            _logger.info(f'TrajectoryDistillationTask: {self.num_teacher_blocks} teacher blocks -> {num_points} '
                         f'student time points ({mapping}), tokens={tokens}, projection={projection is not None}')

    # ---- set-up -------------------------------------------------------------------------------
    @staticmethod
    @torch.no_grad()
    def _init_student(student: nn.Module, teacher: nn.Module) -> None:
        """Copy (not share) the teacher's patch embedding, [CLS] and position embedding, frozen; and
        its classifier when the shapes match."""
        copied = []
        pairs = [('patch_embed', 'patch_embed'), ('cls_token', 'cls_token'), ('pos_embed', 'pos_embed')]
        for s_name, t_name in pairs:
            s_obj, t_obj = getattr(student, s_name, None), getattr(teacher, t_name, None)
            if s_obj is None or t_obj is None:
                continue
            s_state = s_obj.state_dict() if isinstance(s_obj, nn.Module) else {'': s_obj}
            t_state = t_obj.state_dict() if isinstance(t_obj, nn.Module) else {'': t_obj}
            if s_state.keys() != t_state.keys() or any(s_state[k].shape != t_state[k].shape for k in s_state):
                raise ValueError(f'cannot initialise the student {s_name} from the teacher: shapes differ '
                                 f'({ {k: tuple(v.shape) for k, v in s_state.items()} } vs '
                                 f'{ {k: tuple(v.shape) for k, v in t_state.items()} })')
            for k in s_state:
                s_state[k].copy_(t_state[k])
            (s_obj.requires_grad_(False) if isinstance(s_obj, nn.Module) else s_obj.requires_grad_(False))
            copied.append(s_name)
        s_head, t_head = student.get_classifier(), teacher.get_classifier()
        if isinstance(s_head, nn.Linear) and isinstance(t_head, nn.Linear) and s_head.weight.shape == t_head.weight.shape:
            s_head.load_state_dict(t_head.state_dict())
            copied.append('head')
        _logger.info(f'student initialised from the teacher: {copied} (embeddings frozen)')

    def _teacher_input(self, x: torch.Tensor) -> torch.Tensor:
        x = self.teacher.normalize_input(x, self.student_mean, self.student_std)
        if self.teacher_input_size is not None and tuple(x.shape[-2:]) != self.teacher_input_size:
            x = F.interpolate(x, size=self.teacher_input_size, mode='bicubic', align_corners=False)
        return x

    @torch.no_grad()
    def _teacher_states(self, x: torch.Tensor) -> List[Tuple[Optional[torch.Tensor], torch.Tensor]]:
        items = self.teacher.model.forward_intermediates(
            self._teacher_input(x), indices=self.num_teacher_blocks, output_fmt='NLC',
            return_prefix_tokens=True, intermediates_only=True)
        return [(p, s) for s, p in map(_split, items)]

    def _targets(self, state) -> torch.Tensor:
        """The vector compared per time point: [CLS] if the teacher has one, else pooled patches."""
        prefix, patches = state
        return prefix[:, 0] if self.teacher_has_cls else patches.mean(1)

    @torch.no_grad()
    def calibrate(self, x: torch.Tensor) -> List[int]:
        """Measure the teacher's step distances on ``x`` and set the student time points."""
        if self.mapping != 'uniform':
            states = self._teacher_states(x)
            distances = teacher_step_distances([self._targets(s) for s in states])
            num_points = _num_time_points(unwrap_model(self.trainable_module).student)
            indices = torch.tensor(map_teacher_to_student(
                self.num_teacher_blocks, num_points, self.mapping, distances, self.mapping_temperature),
                device=x.device)
            if dist.is_available() and dist.is_initialized():
                dist.broadcast(indices, src=0)  # every rank aligns to the same time points
            unwrap_model(self.trainable_module).indices = indices.tolist()
            if self.verbose:
                _logger.info(f'calibrated {self.mapping} mapping: distances {[round(d, 3) for d in distances]} '
                             f'-> student time points {indices.tolist()}')
        self.calibrated = True
        return unwrap_model(self.trainable_module).indices

    # ---- timm TrainingTask API -------------------------------------------------------------
    @property
    def student_indices(self) -> List[int]:
        return unwrap_model(self.trainable_module).indices

    def train(self, mode: bool = True) -> 'TrajectoryDistillationTask':
        super().train(mode)
        self.teacher.eval()
        return self

    def prepare_distributed(self, device_ids: Optional[list] = None, **ddp_kwargs) -> 'TrajectoryDistillationTask':
        from torch.nn.parallel import DistributedDataParallel as DDP
        self.teacher.requires_grad_(False)
        self.trainable_module = DDP(self.trainable_module, device_ids=device_ids, **ddp_kwargs)
        return self

    def get_eval_model(self, module: Optional[nn.Module] = None, ema: bool = False) -> Optional[nn.Module]:
        resolved = super().get_eval_model(module=module, ema=ema)
        current = resolved
        while current is not None:
            if isinstance(current, TrajectoryStudent):
                return current.student
            current = getattr(current, 'module', None)
        return resolved

    def get_task_state(self, module: Optional[nn.Module] = None, ema: bool = False) -> Dict[str, Any]:
        module = module if module is not None else self.get_trainable_module(ema=ema)
        if module is None:
            return {}
        trainable = unwrap_model(module)
        return {'projection': trainable.projection.state_dict(), 'indices': list(trainable.indices),
                'epochs_started': trainable.epochs_started}

    def load_task_state(self, state, strict: bool = True, module: Optional[nn.Module] = None, ema: bool = False):
        if not state:
            return
        module = module if module is not None else self.get_trainable_module(ema=ema)
        trainable = unwrap_model(module)
        trainable.projection.load_state_dict(state.get('projection', {}), strict=strict)
        trainable.indices = list(state['indices'])
        trainable.epochs_started = state.get('epochs_started', trainable.epochs_started)
        self.calibrated = True

    def get_clip_parameters(self, exclude_head: bool = False):
        return [p for p in unwrap_model(self.trainable_module).parameters() if p.requires_grad]

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> Dict[str, torch.Tensor]:
        if not self.calibrated:
            self.calibrate(input)
        logits, student_states, raw_states = self.trainable_module(input)
        teacher_states = self._teacher_states(input)
        kd_losses = []
        for (s_prefix, s_patches), t_state in zip(student_states, teacher_states):
            if self.teacher_has_cls:
                kd = F.mse_loss(s_prefix[:, 0], self._targets(t_state))
            else:
                kd = F.mse_loss(s_patches.mean(1), self._targets(t_state))
            if self.tokens == 'all':
                kd = kd + F.mse_loss(s_patches, self._resample_patches(t_state[1], s_patches.shape[1]))
            kd_losses.append(kd)
        kd_loss = torch.stack(kd_losses).mean()
        task_loss = self.criterion(logits, target)
        epoch = max(unwrap_model(self.trainable_module).epochs_started - 1, 0)
        task_weight = self.task_loss_weight if epoch >= self.ce_start_epoch else 0.
        loss = task_weight * task_loss + self.distill_loss_weight * kd_loss
        result = {'loss': loss, 'output': logits, 'task_loss': task_loss, 'kd_loss': kd_loss}
        if self.attn_mass_weight or self.jasmin_weight:
            from ..analysis import attention_probs, field_attention
            student = unwrap_model(self.trainable_module).student
            if self.attn_mass_weight:
                t_block = self.teacher.model.blocks[-1]
                prefix, patches = teacher_states[-2]
                t_in = torch.cat([prefix, patches], 1) if prefix is not None else patches
                with torch.no_grad():
                    t_mass = cls_attention_mass(attention_probs(t_block.attn, t_block.norm1(t_in)),
                                                prefix.shape[1] if prefix is not None else 0)
                s_mass = cls_attention_mass(field_attention(student, raw_states[-1]), student.num_prefix_tokens)
                result['attn_mass_loss'] = attention_mass_l1(s_mass, t_mass)
                result['loss'] = result['loss'] + self.attn_mass_weight * result['attn_mass_loss']
            if self.jasmin_weight:
                n = _num_time_points(student)
                late = [z for i, z in zip(self.student_indices, raw_states) if (i + 1) / n >= 0.15]
                result['jasmin_loss'] = torch.stack(
                    [jasmin_loss(field_attention(student, z), self.jasmin_k) for z in late]).mean()
                result['loss'] = result['loss'] + self.jasmin_weight * result['jasmin_loss']
        return result

    @staticmethod
    def _resample_patches(patches: torch.Tensor, num_student_patches: int) -> torch.Tensor:
        """Teacher patch tokens (B, M_t, D) on an (h, w) grid -> the student's grid (B, M_s, D)."""
        B, M, D = patches.shape
        if M == num_student_patches:
            return patches
        side_t, side_s = round(M ** 0.5), round(num_student_patches ** 0.5)
        if side_t ** 2 != M or side_s ** 2 != num_student_patches:
            raise ValueError(f'tokens="all" needs square patch grids, got {M} teacher / {num_student_patches} '
                             'student patches; use tokens="cls"')
        grid = patches.transpose(1, 2).reshape(B, D, side_t, side_t)
        grid = F.interpolate(grid, size=(side_s, side_s), mode='bilinear', align_corners=False)
        return grid.flatten(2).transpose(1, 2)
