"""Model families; importing this package registers every model with timm."""
from .odevit import ODEViT
