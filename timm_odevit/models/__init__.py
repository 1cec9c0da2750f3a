"""Model families; importing this package registers every model with timm."""
from ._checkpoint import checkpoint_filter_fn
from ._common import ContinuousDepthViT, embed_tokens
from .bvit import BViT
from . import baselines  # noqa: F401  (the discrete ViTs matched to ODE-ViT and bViT)
from .odeified import odeify
from .odevit import ODEViT
