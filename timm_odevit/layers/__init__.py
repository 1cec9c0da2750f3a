"""Building blocks: CenterNorm, attention variants, the vector fields, the stepper and the continuous-depth stack
that integrates a field where a ViT's blocks stand."""
from .attention import ATTN_TYPES, ODEAttention, attention_probs, explicit_attention
from .block_fields import FIELD_TYPES, BlockField
from .center_norm import CenterNorm
from .depth_stack import ContinuousDepthStack, DepthInterval, active_stochastic_modules, depth_stack
from .odevit_field import FIELD_NORMS, ODEViTField, TimeEmbedding
from .solver import (
    ADAMS_METHODS,
    ADAPTIVE_METHODS,
    MAX_STEPS,
    METHODS,
    OPTIONS,
    RUNGE_KUTTA_METHODS,
    SOLVER_KWARGS,
    SolverConfig,
    odeint_grid,
    pop_solver_kwargs,
    rk_step,
)
from .spectral_init import SPECTRAL_INIT_TYPES, spectral_init_
