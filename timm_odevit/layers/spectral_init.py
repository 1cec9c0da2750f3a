"""Spectral initialisation: xavier-normal weights scaled to spectral norm 1."""
import torch
from torch import nn


# what spectral_init_ re-initialises
SPECTRAL_INIT_TYPES = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


@torch.no_grad()
def spectral_init_(module: nn.Module) -> nn.Module:
    """Re-initialise every Linear and Conv weight in ``module``: xavier-normal, then divide by its
    largest singular value (conv kernels as (out, in·k·k) matrices); biases to 0.

    ODE-ViT's initialisation (spectral norm 1 at init keeps the field's Lipschitz constant small).
    Unlike the reference, fused attention in-projections (``qkv``) are included: the whole fused
    matrix gets norm 1, so each of its q/k/v blocks has norm ≤ 1. Meta tensors are left alone.
    """
    for m in module.modules():
        if isinstance(m, SPECTRAL_INIT_TYPES) and not m.weight.is_meta:
            nn.init.xavier_normal_(m.weight)
            sigma = torch.linalg.matrix_norm(m.weight.flatten(1).float(), ord=2)
            m.weight.div_(sigma.to(m.weight.dtype))
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    return module
