"""timm_odevit: continuous-depth Vision Transformers (ODE-ViT, bViT) as timm models.

``import timm_odevit`` registers every model with timm (``timm.create_model('odevit_tiny_cifar')``).
"""
from .layers import BlockField, CenterNorm, ODEAttention, ODEBlock, ODEViTField, RecurrentBlock, SolverConfig
from .models import BViT, ODEViT
from .odeify import ODEBlockStack, odeify

__version__ = '0.1.0'
