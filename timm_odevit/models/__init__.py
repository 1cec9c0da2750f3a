"""Model families; importing this package registers every model with timm."""
from ._common import ContinuousDepthViT, checkpoint_filter_fn, embed_tokens
from .bvit import BViT
from . import baselines  # noqa: F401  (discrete ViTs matched to ODE-ViT)
from .odeified import odeify
from .odevit import ODEViT
