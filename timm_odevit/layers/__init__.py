"""Building blocks: CenterNorm, attention variants, the vector fields, the solver settings and the continuous-depth
stack that integrates a field where a ViT's blocks stand."""
from .attention import ODEAttention, attention_probs, explicit_attention
from .block_fields import BlockField
from .center_norm import CenterNorm
from .depth_interval import DepthInterval
from .depth_stack import ContinuousDepthStack, depth_stack
from .odevit_field import ODEViTField
from .solver import METHODS, SolverConfig, solver_config
from .spectral_init import spectral_init_
