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

x / h: the tokens pooled as the teacher's head pools them (``tokens='cls'``: [CLS] for ``global_pool='token'``, the
paper's choice; the mean of the patch tokens for average-pooled teachers, e.g. Eva02, BEiT); ``tokens='all'`` adds
every patch token, the teacher's patch grid interpolated to the student's. The teacher is a
:class:`~timm_odevit.tasks.teacher.TrajectoryTeacher`, the student a :class:`~timm_odevit.tasks.student.TrajectoryStudent`.
"""
import logging
from typing import Any, Dict, Optional, Tuple, Union

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from timm.task import TrainingTask
from timm.task.classification import resolve_classification_loss
from timm.utils import unwrap_model

from ..layers import depth_stack
from .._checks import check_int, check_number
from .attention_losses import attention_mass_l1, cls_attention_mass, jasmin_loss, resample_square
from .student import TrajectoryStudent, copy_teacher_embeddings, student_normalisation
from .teacher import TrajectoryTeacher, has_class_token, load_teacher
from .time_mapping import check_mapping, teacher_step_distances

_logger = logging.getLogger(__name__)
TOKEN_MODES = ('cls', 'all')


class TrajectoryDistillationTask(TrainingTask):
    """Align a student ODE's trajectory with a discrete timm ViT teacher's block outputs.

    Args:
        student_model: a timm_odevit model (anything with forward_intermediates over time points).
        teacher_model: timm model name (pretrained), 'hf-hub:…'/'local-dir:…', or a module.
        criterion / criterion_kwargs: classification loss.
        teacher_checkpoint: local checkpoint file for a teacher given by name (:func:`load_teacher`).
        teacher_model_kwargs: create_model kwargs of a teacher given by name (over a checkpoint's own).
        mapping: 'uniform' | 'arclength' | 'softmax' (teacher block -> student time point); the last two measure the
            teacher's step distances on the first training batch (rank 0's, broadcast), or on the images given to
            :meth:`calibrate` before.
        mapping_temperature: T of the softmax mapping (reference: 30).
        tokens: 'cls' (reference): the teacher's pooled representation, as its head pools it ([CLS] for
            global_pool='token', the mean of the patch tokens for 'avg' — Eva02, BEiT, avg-pooled ViTs),
            against the student's tokens pooled the same way; 'all': that plus every patch token.
        distill_loss_weight, task_loss_weight: λ for the trajectory and CE terms (timm's modes: both 1 by default,
            distill 1 − task when only task is given).
        ce_start_epoch: CE is off before this epoch (the reference's curriculum).
        init_student_from_teacher: copy the teacher's patch embedding, [CLS], position embedding
            (a copy, frozen; the teacher is untouched) and classifier (when shapes match).
        mean, std: the normalisation of the images the task gets (the data loader's: train.py's --mean/--std, else
            the student's pretrained cfg); the teacher sees them renormalised to its own.
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
        temperature = check_mapping(mapping, mapping_temperature)
        if tokens not in TOKEN_MODES:
            raise ValueError(f'Unknown tokens {tokens!r}; choose one of {TOKEN_MODES}')
        self.mapping = mapping
        self.tokens = tokens
        self.task_loss_weight = 1.0
        if task_loss_weight is not None:
            self.task_loss_weight = check_number('task_loss_weight', task_loss_weight)
        if distill_loss_weight is None:
            if self.task_loss_weight > 1:
                raise ValueError(
                    f'task_loss_weight={task_loss_weight!r} > 1 makes the default '
                    'distill_loss_weight (1 - task_loss_weight) negative: give distill_loss_weight explicitly'
                )
            distill_loss_weight = 1.0 if task_loss_weight is None else 1.0 - self.task_loss_weight
        self.distill_loss_weight = check_number('distill_loss_weight', distill_loss_weight)
        self.attn_mass_weight = check_number('attn_mass_weight', attn_mass_weight)
        self.jasmin_weight = check_number('jasmin_weight', jasmin_weight)
        # the rank compared with the top probability
        self.jasmin_k = check_int('jasmin_k', jasmin_k, 2)
        self.ce_start_epoch = check_int('ce_start_epoch', ce_start_epoch, 0)
        student = unwrap_model(student_model)
        num_points = depth_stack(student).num_time_points
        self.criterion = resolve_classification_loss(
            criterion,
            self.device,
            criterion_kwargs=criterion_kwargs,
        )
        for name, value in (('mean', mean), ('std', std)):  # of the images the task gets
            self.register_buffer(
                f'student_{name}',
                torch.tensor(student_normalisation(name, value, student), device=self.device).view(1, -1, 1, 1),
                persistent=False,
            )

        teacher = load_teacher(
            teacher_model,
            teacher_checkpoint,
            num_classes=student.num_classes,
            device=self.device,
            model_kwargs=teacher_model_kwargs,
        )
        if attn_mass_weight and not (has_class_token(teacher) and has_class_token(student)):
            raise ValueError('the attention-mass loss needs a [CLS] token in teacher and student')
        self.teacher = TrajectoryTeacher(
            teacher,
            bool(attn_mass_weight),
            device=self.device,
            dtype=self.dtype,
        )
        if self.teacher.pool == 'token' and not has_class_token(student):
            raise ValueError(
                f'the teacher {type(teacher).__name__} classifies from its [CLS] token but the '
                'student has none to align with it: build the student with class_token=True'
            )
        projection = nn.Identity()
        if teacher.embed_dim != student.embed_dim:
            projection = nn.Linear(
                student.embed_dim,
                teacher.embed_dim,
                device=self.device,
                dtype=self.dtype,
            )
        if init_student_from_teacher:
            copy_teacher_embeddings(student, teacher)
        self.trainable_module = TrajectoryStudent(
            student_model,
            projection,
            self.teacher.num_blocks,
            mapping,
            temperature,
        )
        self.calibrated = mapping == 'uniform'
        if verbose:
            pool = self.teacher.pool
            aligned = '[CLS] token' if pool == 'token' else \
                f'{pool}-pooled {"" if self.teacher.include_prefix else "patch "}tokens'
            _logger.info(
                f'TrajectoryDistillationTask: {self.teacher.num_blocks} teacher blocks -> '
                f'{num_points} student time points ({mapping}), tokens={tokens}, '
                f'projection={isinstance(projection, nn.Linear)}; aligning the teacher\'s {aligned} '
                f'(global_pool={getattr(teacher, "global_pool", None)!r}) with the student\'s {aligned}'
            )

    def calibrate(self, x: torch.Tensor) -> None:
        """Measure the teacher's step distances on ``x`` (its states carry no gradient) and align its blocks with
        the student's time points."""
        trainable = unwrap_model(self.trainable_module)
        if self.mapping != 'uniform':
            states = self.teacher.states(x, self.student_mean, self.student_std)
            pooled = [self.teacher.pooled(h, self.teacher.model.num_prefix_tokens) for h in states]
            distances = torch.tensor(
                teacher_step_distances(pooled),
                device=x.device,
                dtype=torch.float64,
            )
            if dist.is_available() and dist.is_initialized():
                dist.broadcast(distances, src=0)  # every rank aligns to the same time points
            trainable.calibrate(distances.tolist())
            if self.verbose:
                rounded = [round(d, 3) for d in trainable.distances]
                _logger.info(
                    f'calibrated {self.mapping} mapping: distances {rounded} -> teacher blocks '
                    f'{trainable.teacher_blocks} at student time points {trainable.indices}'
                )
        self.calibrated = True

    # ---- timm TrainingTask API -------------------------------------------------------------
    def prepare_distributed(self, device_ids: Optional[list] = None, **ddp_kwargs) -> 'TrajectoryDistillationTask':
        self.trainable_module = DistributedDataParallel(self.trainable_module, device_ids=device_ids, **ddp_kwargs)
        return self

    def compile(self, backend: str = 'inductor', mode: Optional[str] = None, **compile_kwargs) -> nn.Module:
        """``torch.compile`` the student's training forward (with the projection) and its eval forward, before
        DDP wrapping (train.py's --torchcompile); the teacher's intermediates and attention hook run eagerly."""
        student = unwrap_model(self.trainable_module).student
        self.eval_model = torch.compile(student, backend=backend, mode=mode, **compile_kwargs)
        self.trainable_module = torch.compile(self.trainable_module, backend=backend, mode=mode, **compile_kwargs)
        return self.eval_model

    def get_eval_model(self, module: Optional[nn.Module] = None, ema: bool = False) -> Optional[nn.Module]:
        resolved = super().get_eval_model(module=module, ema=ema)
        inner = unwrap_model(resolved)
        return inner.student if isinstance(inner, TrajectoryStudent) else resolved

    def get_task_state(self, module: Optional[nn.Module] = None, ema: bool = False) -> Dict[str, Any]:
        module = module if module is not None else self.get_trainable_module(ema=ema)
        return {} if module is None else unwrap_model(module).task_state()

    def load_task_state(self, state, strict: bool = True, module: Optional[nn.Module] = None, ema: bool = False):
        if state:
            module = module if module is not None else self.get_trainable_module(ema=ema)
            unwrap_model(module).load_task_state(state, strict)
            self.calibrated = True

    def get_clip_parameters(self, exclude_head: bool = False):
        return [p for p in unwrap_model(self.trainable_module).parameters() if p.requires_grad]

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> Dict[str, torch.Tensor]:
        if not self.calibrated:
            self.calibrate(input)
        logits, projected, states, blocks, indices, num_points = self.trainable_module(input)
        teacher_states = self.teacher.states(input, self.student_mean, self.student_std)
        trainable = unwrap_model(self.trainable_module)
        student = trainable.student
        P = student.num_prefix_tokens
        P_t = self.teacher.model.num_prefix_tokens
        kd_losses = []
        for z, k in zip(projected, blocks):
            h = teacher_states[k]
            kd = F.mse_loss(self.teacher.pooled(z, P), self.teacher.pooled(h, P_t))
            if self.tokens == 'all':
                patches = h[:, P_t:]
                num_patches = z.shape[1] - P
                if patches.shape[1] != num_patches:  # the teacher's patch grid -> the student's
                    patches = resample_square(patches.transpose(1, 2), num_patches, 'bilinear')
                    patches = patches.transpose(1, 2)
                kd = kd + F.mse_loss(z[:, P:], patches)
            kd_losses.append(kd)
        kd_loss = torch.stack(kd_losses).mean()
        task_loss = self.criterion(logits, target)
        epoch = max(trainable.epochs_started - 1, 0)
        task_weight = self.task_loss_weight if epoch >= self.ce_start_epoch else 0.
        loss = task_weight * task_loss + self.distill_loss_weight * kd_loss
        result = {'output': logits, 'task_loss': task_loss, 'kd_loss': kd_loss}
        field = depth_stack(student).field
        if self.attn_mass_weight:
            t_mass = cls_attention_mass(self.teacher.attention(teacher_states[-1].device), P_t)
            s_mass = cls_attention_mass(field.attention_probs(states[-1]), P)
            result['attn_mass_loss'] = attention_mass_l1(s_mass, t_mass)
            loss = loss + self.attn_mass_weight * result['attn_mass_loss']
        if self.jasmin_weight:
            # the student's attention over the last 85 % of the trajectory
            late = [z for i, z in zip(indices, states) if (i + 1) / num_points >= 0.15]
            jasmin = [jasmin_loss(field.attention_probs(z), self.jasmin_k) for z in late]
            result['jasmin_loss'] = torch.stack(jasmin).mean()
            loss = loss + self.jasmin_weight * result['jasmin_loss']
        return {'loss': loss, **result}
