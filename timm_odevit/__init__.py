"""timm_odevit: continuous-depth Vision Transformers (ODE-ViT, bViT) as timm models.

``import timm_odevit`` registers every model with timm (``timm.create_model('odevit_tiny_cifar')``).
"""
from .layers import (
    BlockField, CenterNorm, ContinuousDepthStack, ODEAttention, ODEBlock, ODEViTField, Recurrence, SolverConfig,
)
from .models import BViT, ContinuousDepthViT, ODEViT, odeify

from .hub import install_config_error_context

ODEBlockStack = ContinuousDepthStack  # former name of odeify's stack
install_config_error_context()

__version__ = '0.1.0'
