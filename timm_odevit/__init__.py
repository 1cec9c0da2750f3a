"""timm_odevit: continuous-depth Vision Transformers (ODE-ViT, bViT) as timm models.

``import timm_odevit`` registers every model with timm (``timm.create_model('odevit_tiny_cifar')``) and changes
nothing else: no function of timm, torch, huggingface_hub or matplotlib is replaced.
"""
from .layers import (
    BlockField,
    CenterNorm,
    ContinuousDepthStack,
    ODEAttention,
    ODEViTField,
    SolverConfig,
)
from .models import BViT, ContinuousDepthViT, ODEViT, odeify

__version__ = '0.1.0'
