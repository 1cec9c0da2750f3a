"""Interpretability of continuous-depth ViTs: trajectories, attention over time, Lyapunov
exponents and stability diagnostics (the analyses of arXiv 2511.16501; for bViT over iterations).

All functions take a model whose ``blocks`` is a continuous-depth stack (ODEViT, BViT, an odeified
timm ViT) and a normalised image batch x (B, C, H, W):

    trajectory(model, x)            -> (P + 1, B, N, D) states at t_0 = 0, t_1, …, t_P
    attention_maps(model, states)   -> (P + 1, B, H, N, N) attention probabilities at each state
    cls_attention_mass(model, maps) -> (P + 1, B, h, w) [CLS] -> patch attention on the patch grid
    mass_mask(mass, q)              -> the smallest patch set holding a fraction q of the mass
    lyapunov_exponent(model, x)     -> largest Lyapunov exponent of the [CLS] trajectory
    lipschitz_estimate(model, x)    -> max over the trajectory of ‖∂ψ/∂X‖₂ (power iteration)
    euler_error_bound(model, x)     -> (e^L − 1)/(2 L N) · sup‖Ẍ‖ (the reference's global-error bound)
"""
import math
from typing import Callable, Dict, Optional, Tuple

import torch
from torch import nn

from torchdiffeq import odeint

from ._checks import check_int, check_number, is_real
from .layers import (  # noqa: F401  (attention_probs: part of this API)
    attention_probs,
    depth_stack,
    explicit_attention,
)
from .models import embed_tokens
from .tasks.attention_losses import cls_attention_mass as _cls_mass


def field_fn(model: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """X -> dX/dt at t = 0 (for the bViT recurrence the state-subtracted field B(X) − X, its increment)."""
    stack = depth_stack(model)
    return lambda z: stack.field(z.new_zeros(()), z)


@torch.no_grad()
def trajectory(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """States at every time point, including the embedding at t = 0: (P + 1, B, N, D)."""
    stack = depth_stack(model)
    model.eval()
    z0 = embed_tokens(model, x)
    states = stack.trajectory(z0, range(stack.num_time_points))
    return torch.cat([z0[None], states])


@torch.no_grad()
def attention_maps(model: nn.Module, states: torch.Tensor) -> torch.Tensor:
    """Attention probabilities the field applies at each state: (P + 1, B, H, N, N) (the times of the states:
    ``depth_stack(model).solver.grid()``, grid times or iteration numbers)."""
    field = depth_stack(model).field
    return torch.stack([field.attention_probs(z) for z in states])


def cls_attention_mass(
    model: nn.Module, maps: torch.Tensor, grid: Optional[Tuple[int, int]] = None
) -> torch.Tensor:
    """[CLS] -> patch attention (mean over heads, renormalised over patches) on the patch grid:
    (P + 1, B, h, w). ``grid``: (h, w) of the input's patches (default: the model's built size; give it
    for another input size, e.g. ``model.patch_embed.dynamic_feat_size(x.shape[-2:])``)."""
    if not getattr(model, 'has_class_token', False):
        raise ValueError('the model has no [CLS] token')
    mass = _cls_mass(maps, model.num_prefix_tokens)  # (P + 1, B, M)
    h, w = grid if grid is not None else model.patch_embed.grid_size
    if h * w != mass.shape[-1]:
        raise ValueError(
            f'the maps have {mass.shape[-1]} patches but the grid is {h}x{w}'
            + ('' if grid is not None else ' (the built input size): pass grid=(h, w) of the input')
        )
    return mass.reshape(*mass.shape[:2], h, w)


def mass_mask(mass: torch.Tensor, q: float = 0.9) -> torch.Tensor:
    """Boolean mask of the smallest set of patches holding at least a fraction q of the mass
    (the thresholded-mass view), same shape as ``mass`` (…, h, w)."""
    if not is_real(q) or not 0 < q <= 1:  # NaN fails too
        raise ValueError(f'q (the mass fraction) must be a number in (0, 1], got {q!r}')
    flat = mass.flatten(-2)
    values, order = flat.sort(-1, descending=True)
    keep_sorted = (values.cumsum(-1) - values) < q * flat.sum(-1, keepdim=True)
    mask = torch.zeros_like(flat, dtype=torch.bool).scatter(-1, order, keep_sorted)
    return mask.reshape(mass.shape)


def lyapunov_exponent_of_field(
    f: Callable[[torch.Tensor], torch.Tensor],
    x0: torch.Tensor,
    t_end: float,
    steps: int = 24,
    token: Optional[int] = 0,
    seed: int = 0,
    discrete: bool = False,
    transient: float = 0.0,
) -> Tuple[float, torch.Tensor]:
    """Largest Lyapunov exponent of dx/dt = f(x) (or of the map x -> x + f(x) when ``discrete``).

    A unit tangent vector v (on token ``token``, or the whole state if None) is carried along the trajectory by the
    JVP v' = J_f(x)·v: state and tangent integrated together by ``torchdiffeq.odeint`` with RK4 (3/8 rule) on
    ``steps`` uniform steps (Euler when discrete: with h = 1 the map). v is linear in its start, so the
    per-step log growth log‖v_{k+1}‖ − log‖v_k‖ is that of a tangent renormalised after every step;
    λ = Σ growth / (h · steps) over the steps after the ``transient`` fraction.

    Returns λ and the per-step log growth (steps,).
    """
    steps = check_int('steps', steps)
    if not is_real(transient) or not 0 <= transient < 1:
        raise ValueError(f'transient must be a number in [0, 1), got {transient!r}')
    check_number('t_end', t_end, positive=True)
    # below steps: transient < 1
    skip = int(transient * steps)
    generator = torch.Generator().manual_seed(seed)
    noise = torch.randn(x0.shape, generator=generator, dtype=x0.dtype).to(x0.device)
    v = noise if token is None else torch.zeros_like(x0)
    if token is not None:
        v[:, token] = noise[:, token]
    t = torch.linspace(
        0.0,
        t_end,
        steps + 1,
        dtype=torch.float64 if x0.dtype == torch.float64 else torch.float32,
        device=x0.device,
    )
    _, vs = odeint(
        lambda _, s: torch.func.jvp(f, (s[0],), (s[1],)),
        (x0, v / v.norm()),
        t,
        method='euler' if discrete else 'rk4',
    )
    growth = vs.flatten(1).norm(dim=1).log().diff().cpu()
    return growth[skip:].sum().item() / (t_end / steps * (steps - skip)), growth


@torch.no_grad()
def lyapunov_exponent(
    model: nn.Module, x: torch.Tensor, steps: int = 24
) -> Tuple[float, torch.Tensor]:
    """Largest Lyapunov exponent of the [CLS] trajectory, per unit of the solver's time (per iteration for the
    bViT recurrence, whose own Euler steps of h = 1 are the map). RK4 over ``steps`` steps as in the reference, in
    float64 on a copy of the model (trained fields can grow the state by many orders of magnitude)."""
    import copy
    check_int('steps', steps)
    model = copy.deepcopy(model).double().eval()
    cfg = depth_stack(model).solver
    discrete = cfg.unit == 'iteration'
    with explicit_attention(model):
        return lyapunov_exponent_of_field(
            field_fn(model),
            embed_tokens(model, x[:1].double()),
            cfg.t_end,
            cfg.steps if discrete else steps,
            discrete=discrete,
        )


def _spectral_norm_of_jacobian(f, x: torch.Tensor, iters: int = 20, seed: int = 0) -> float:
    """‖J‖₂ of ``f`` at ``x`` by ``iters`` (>= 1) power iterations on JᵀJ: ‖J v‖ for the last unit vector v."""
    generator = torch.Generator().manual_seed(seed)
    v = torch.randn(x.shape, generator=generator, dtype=x.dtype).to(x.device)
    v = v / v.norm()
    _, vjp = torch.func.vjp(f, x)
    for _ in range(iters):
        _, jv = torch.func.jvp(f, (x,), (v,))
        u = vjp(jv)[0]  # Jᵀ J v
        v = u / u.norm()
    return jv.norm().item()


def lipschitz_estimate(model: nn.Module, x: torch.Tensor, iters: int = 20) -> float:
    """max over the trajectory's states of ‖∂ψ/∂X‖₂ by power iteration on JᵀJ (a local Lipschitz
    estimate of the field ψ on the data's trajectory)."""
    check_int('iters (power iterations)', iters)
    f = field_fn(model)
    with torch.no_grad():
        states = trajectory(model, x[:1])
    with explicit_attention(model):
        return max(_spectral_norm_of_jacobian(f, z, iters) for z in states)


def euler_error_bound(
    model: nn.Module, x: torch.Tensor, lipschitz: Optional[float] = None
) -> Dict[str, float]:
    """The reference's Euler global-error bound (e^L − 1)/(2 L N) · sup_t ‖Ẍ(t)‖ with Ẍ = J_ψ ψ
    evaluated on the trajectory's states, L the Lipschitz estimate, N the number of steps
    (over the model's horizon; per unit time L is scaled by t_end). For the bViT recurrence (Euler, h = 1 on
    ż = B(z) − z) it bounds the recurrence's distance from that ODE's solution."""
    solver = depth_stack(model).solver
    f = field_fn(model)
    states = trajectory(model, x[:1])
    L = lipschitz if lipschitz is not None else lipschitz_estimate(model, x)
    L_t = L * solver.t_end
    with explicit_attention(model), torch.no_grad():
        xdd = (
            max(torch.func.jvp(f, (z,), (f(z),))[1].norm().item() for z in states) * solver.t_end**2
        )
    N = solver.steps
    bound = (math.expm1(L_t) / (2 * L_t * N) * xdd) if L_t > 0 else xdd / (2 * N)
    return {'bound': bound, 'lipschitz': L, 'sup_second_derivative': xdd, 'steps': N}
