"""Building blocks: CenterNorm, attention variants, the ODE-ViT field, the solver layer, ODEBlock."""
from .attention import ATTN_TYPES, ODEAttention
from .block_fields import FIELD_TYPES, BlockField
from .center_norm import CenterNorm
from .ode_block import ODEBlock
from .recurrent_block import RecurrentBlock
from .odevit_field import FIELD_NORMS, ODEViTField, TimeEmbedding
from .solver import (
    ADAMS_METHODS, ADAPTIVE_METHODS, FIXED_GRID_METHODS, MAX_STEPS, METHODS, RUNGE_KUTTA_METHODS, SolverConfig,
    assert_finite, solve, solver_options,
)
from .spectral_init import spectral_init_
