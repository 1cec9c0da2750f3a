"""Attention regularisers of ODE-ViT's training: JaSMin and the [CLS] -> patch attention-mass L1."""
import torch
import torch.nn.functional as F


def jasmin_loss(probs: torch.Tensor, k: int = 10, eps: float = 1e-12) -> torch.Tensor:
    """JaSMin (Yudin et al. 2025) on attention probabilities (B, H, N, N).

    Per attention row with sorted probabilities p(1) ≥ p(2) ≥ …: g_j = p(j)·(1 − p(j) + p(j+1))
    (p(N+1) = 0); the row's loss is log(g_1 / g_k); max over queries, mean over heads and batch.
    """
    N = probs.shape[-1]
    if not 1 < k <= N:
        raise ValueError(f'JaSMin k must be in 2..{N} (the number of tokens), got {k}')
    p = probs.sort(dim=-1, descending=True).values
    g = p * (1 - p + F.pad(p[..., 1:], (0, 1)))  # p(j + 1), 0 after the last
    row = g[..., 0].clamp_min(eps).log() - g[..., k - 1].clamp_min(eps).log()  # (B, H, N)
    return row.amax(dim=-1).mean()


def cls_attention_mass(probs: torch.Tensor, num_prefix_tokens: int) -> torch.Tensor:
    """[CLS] -> patch attention (mean over heads) renormalised over patches: (…, H, N, N) -> (…, M)."""
    mass = probs[..., 0, num_prefix_tokens:].mean(-2)
    return mass / mass.sum(-1, keepdim=True)


def resample_square(x: torch.Tensor, num: int, mode: str) -> torch.Tensor:
    """Values (B, C, M) on a square grid of M patches -> (B, C, num) on a square grid of ``num`` patches."""
    side = round(x.shape[-1] ** 0.5)
    new = round(num ** 0.5)
    if side ** 2 != x.shape[-1] or new ** 2 != num:
        raise ValueError(
            f'resampling needs square patch grids, got {x.shape[-1]} and {num} patches: use tokens="cls"'
        )
    grid = x.reshape(*x.shape[:-1], side, side)
    return F.interpolate(grid, size=(new, new), mode=mode).flatten(-2)  # bilinear: align_corners False


def attention_mass_l1(student_mass: torch.Tensor, teacher_mass: torch.Tensor) -> torch.Tensor:
    """L1 between [CLS] attention-mass maps (B, M_s) and (B, M_t); the teacher's square patch grid
    is resampled to the student's (and renormalised) when they differ."""
    if student_mass.shape[-1] != teacher_mass.shape[-1]:
        teacher_mass = resample_square(teacher_mass[:, None], student_mass.shape[-1], 'area')[:, 0]
        teacher_mass = teacher_mass / teacher_mass.sum(-1, keepdim=True)
    return (student_mass - teacher_mass).abs().sum(-1).mean()
