"""Model families; importing this package registers every model with timm."""
from .bvit import BViT
from .odevit import ODEViT
from . import odeified  # noqa: F401  (registers vit_odeified)
