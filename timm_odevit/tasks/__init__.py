"""timm TrainingTask subclasses used from train.py."""
from .attention_losses import attention_mass_l1, cls_attention_mass, jasmin_loss
from .deep_supervision import DeepSupervisionTask, deep_supervision_loss
from .time_mapping import (
    MAPPINGS,
    align_time_points,
    map_teacher_to_student,
    teacher_step_distances,
)
from .student import TrajectoryStudent
from .teacher import load_teacher
from .trajectory_distillation import TrajectoryDistillationTask
