"""timm TrainingTask subclasses used from train.py."""
from .deep_supervision import DeepSupervisionTask, deep_supervision_loss
