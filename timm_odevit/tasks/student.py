"""The student of trajectory distillation: a continuous-depth ViT and the projection to its teacher's width in one
module (so that DDP sees one forward), with the teacher blocks aligned to its time points; its initialisation from the
teacher and the normalisation of the images it reads."""
import logging
import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

from ..layers import depth_stack
from ..models._cfgs import image_channels
from ..models._common import embed_tokens
from .teacher import intermediate_tokens
from .time_mapping import align_time_points

_logger = logging.getLogger(__name__)


class TrajectoryStudent(nn.Module):
    """Student + width projection; ``forward`` returns (logits, projected states, states, teacher blocks, time
    points, grid points).

    states: the token states (B, N, D_s) at the aligned time points, projected: the same (B, N, D_t). On the
    configured grid the pairs are (``teacher_blocks``, ``indices``); a student with ``train_depth`` draws a grid per
    training forward and the teacher's blocks are aligned to that grid (:func:`align_time_points`, with the
    calibrated ``distances``).
    """

    def __init__(
            self,
            student: nn.Module,
            projection: nn.Module,
            num_blocks: int,
            mapping: str = 'uniform',
            temperature: float = 30.,
    ):
        super().__init__()
        self.student = student
        self.projection = projection
        self.mapping = (num_blocks, mapping, temperature)
        self.distances = None
        self.epochs_started = 0
        # uniform until calibrate() measures the teacher
        self.teacher_blocks, self.indices = align_time_points(num_blocks, depth_stack(student).num_time_points)

    def aligned(self, num_points: int) -> Tuple[List[int], List[int]]:
        """(teacher blocks, time points) on a grid of ``num_points`` by the mapping and the measured distances."""
        num_blocks, mapping, temperature = self.mapping
        return align_time_points(num_blocks, num_points, mapping, self.distances, temperature)

    def calibrate(self, distances: Sequence[float]) -> None:
        """Align the teacher's blocks with the configured grid by its measured step ``distances``."""
        self.distances = list(distances)
        self.teacher_blocks, self.indices = self.aligned(depth_stack(self.student).num_time_points)

    def task_state(self) -> Dict[str, Any]:
        """What a checkpoint keeps beside the student's weights: the projection, the alignment, the epoch count."""
        return {
            'projection': self.projection.state_dict(),
            'indices': list(self.indices),
            'teacher_blocks': list(self.teacher_blocks),
            'distances': self.distances,
            'epochs_started': self.epochs_started,
        }

    def load_task_state(self, state: Dict[str, Any], strict: bool = True) -> None:
        """Restore :meth:`task_state` (of older checkpoints too: without teacher blocks the blocks are 0..n-1)."""
        self.projection.load_state_dict(state.get('projection', {}), strict=strict)
        self.indices = list(state['indices'])
        self.teacher_blocks = list(state.get('teacher_blocks', range(len(self.indices))))
        self.distances = state.get('distances')
        self.epochs_started = state.get('epochs_started', self.epochs_started)

    def train(self, mode: bool = True) -> 'TrajectoryStudent':
        if mode:
            self.epochs_started += 1  # train.py calls train() once at the start of every epoch
        return super().train(mode)

    def no_weight_decay(self):
        return {'student.' + n for n in self.student.no_weight_decay()}

    def forward(self, x: torch.Tensor):
        student = self.student
        stack = depth_stack(student)
        # anytime training: the teacher aligned to the grid drawn now
        if self.training and stack.train_depth is not None:
            drawn = stack.drawn_states(embed_tokens(student, x))
            num_points = len(drawn)
            blocks, indices = self.aligned(num_points)
            final = student.norm(drawn[-1])
            states = [drawn[i] for i in indices]
        else:
            num_points = stack.num_time_points
            blocks = self.teacher_blocks
            indices = self.indices
            final, taps = student.forward_intermediates(
                x,
                indices=indices,
                output_fmt='NLC',
                return_prefix_tokens=True,
            )
            states = [intermediate_tokens(item) for item in taps]
        logits = student.forward_head(final)
        return logits, [self.projection(z) for z in states], states, blocks, indices, num_points


@torch.no_grad()
def copy_teacher_embeddings(student: nn.Module, teacher: nn.Module) -> None:
    """Copy (not share) the teacher's patch embedding, [CLS] and position embedding into the student, frozen; and its
    classifier when the shapes match."""
    copied = []
    for name in ('patch_embed', 'cls_token', 'pos_embed'):
        ours = getattr(student, name, None)
        theirs = getattr(teacher, name, None)
        if ours is None or theirs is None:
            continue
        if isinstance(ours, nn.Module):
            ours.load_state_dict(theirs.state_dict())
        else:
            ours.copy_(theirs)  # torch names a shape mismatch
        ours.requires_grad_(False)
        copied.append(name)
    head = student.get_classifier()
    teacher_head = teacher.get_classifier()
    if (
        isinstance(head, nn.Linear)
        and isinstance(teacher_head, nn.Linear)
        and head.weight.shape == teacher_head.weight.shape
    ):
        head.load_state_dict(teacher_head.state_dict())
        copied.append('head')
    _logger.info(f'student initialised from the teacher: {copied} (embeddings frozen)')


def student_normalisation(
        name: str,
        value: Optional[Sequence[float]],
        student: nn.Module,
) -> Tuple[float, ...]:
    """The loader's per-channel ``mean`` / ``std`` (one value for every channel, as timm's resolve_data_config
    reads it), else the student's pretrained cfg's."""
    if value is None:
        return tuple(student.pretrained_cfg[name])
    channels = image_channels(student)
    value = tuple(value)
    if len(value) == 1:
        value = value * channels
    valid = all(math.isfinite(v) and (v > 0 or name == 'mean') for v in value)
    if len(value) != channels or not valid:
        raise ValueError(
            f'{name} must be {channels} finite numbers{" > 0" if name == "std" else ""}, got {value!r}'
        )
    return value
