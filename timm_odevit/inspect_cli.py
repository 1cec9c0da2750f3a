"""odevit-inspect: figures and a JSON summary of one image's trip through a continuous-depth ViT.

    odevit-inspect --model odevit_tiny_cifar [--checkpoint PATH] --image IMG --out DIR

Writes attention_over_time.png ([CLS] -> patch attention on the image at several times, with the
thresholded-mass contour), trajectory_pca.png (the [CLS] trajectory projected on its two main
principal components), dynamics.png (per-step displacement ‖X_{k+1} − X_k‖ and energy ‖X‖² over
time), lyapunov.png (log growth of the tangent vector per step) and summary.json.
"""
import argparse
import io
import json
import math
import pathlib
from typing import Any, Dict, Optional

import torch
import torch.nn.functional as F

from . import analysis
from ._checks import write_atomic
from .layers import ContinuousDepthStack


def load_image(path: str, model) -> torch.Tensor:
    """Read an image and preprocess it with the model's own data config -> (1, C, H, W): RGB, or its luminance for
    a one-channel model (as timm's ``input_img_mode='L'``)."""
    from timm.data import create_transform, resolve_data_config
    from .data import open_rgb
    config = resolve_data_config(model=model)
    channels = config['input_size'][0]
    if channels not in (1, 3):
        raise ValueError(f'the model reads {channels}-channel images; inspect reads RGB or greyscale images only')
    # 16-bit and palette images converted faithfully; ValueError naming the file
    image = open_rgb(path)
    return create_transform(**config)(image.convert('L') if channels == 1 else image)[None]


def _denormalise(x: torch.Tensor, model) -> torch.Tensor:
    """(1, C, H, W) preprocessed -> (H, W, 3) in [0, 1] to draw (a greyscale image as three equal channels)."""
    mean, std = (torch.tensor(model.pretrained_cfg[k]).view(-1, 1, 1) for k in ('mean', 'std'))
    return (x[0] * std + mean).clamp(0, 1).expand(3, -1, -1).permute(1, 2, 0)


def inspect_image(
    model, x: torch.Tensor, out_dir: str, mass_q: float = 0.9, lyapunov_steps: int = 24
) -> Dict[str, Any]:
    """Write the figures and summary.json of image ``x`` (1, C, H, W) into ``out_dir``; returns the summary."""
    from matplotlib.figure import Figure
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.eval()
    with torch.no_grad():
        logits = model(x)
    states = analysis.trajectory(model, x)  # (P + 1, 1, N, D)
    solver = analysis.depth_stack(model).solver
    times = solver.grid()  # (P + 1,): grid times, or iteration numbers for a recurrence
    maps = analysis.attention_maps(model, states)
    grid = model.patch_embed.dynamic_feat_size(x.shape[-2:])  # the input's patch grid
    mass = analysis.cls_attention_mass(model, maps, grid)[:, 0]  # (P + 1, h, w)
    masks = analysis.mass_mask(mass, mass_q)
    lam, growth = analysis.lyapunov_exponent(model, x, steps=lyapunov_steps)
    unit = solver.unit  # 'iteration' for the bViT recurrence, else 't'
    image = _denormalise(x, model)  # (H, W, C)

    # attention over time
    shown = (
        torch.linspace(1, len(times) - 1, min(6, len(times) - 1)).round().long().unique().tolist()
    )
    fig = Figure(figsize=(3 * len(shown), 3.4))
    axes = fig.subplots(1, len(shown), squeeze=False)
    for ax, k in zip(axes[0], shown):
        up, up_mask = (
            F.interpolate(m[k][None, None].float(), size=image.shape[:2], mode='nearest')[0, 0]
            for m in (mass, masks)
        )
        ax.imshow(image)
        im = ax.imshow(up, cmap='inferno', alpha=0.6)
        ax.contour(up_mask, levels=[0.5], colors='cyan', linewidths=0.8)
        ax.set_title(f'{unit} = {times[k]:.2f}')
        ax.axis('off')
        fig.colorbar(im, ax=ax, fraction=0.046, label='[CLS] attention')
    fig.suptitle(f'[CLS] -> patch attention over time (cyan: {mass_q:.0%} of the mass)')
    _save(fig, out / 'attention_over_time.png')

    # [CLS] trajectory projection
    cls = states[:, 0, 0].float()  # (P + 1, D)
    centred = cls - cls.mean(0)
    _, s, v = torch.linalg.svd(centred, full_matrices=False)
    pc1, pc2 = (centred @ v[:2].T).T
    explained = (s[:2] ** 2 / (s ** 2).sum()).tolist()
    ax = Figure(figsize=(5, 4.2)).subplots()
    ax.plot(pc1, pc2, color='0.6', lw=1)
    ax.figure.colorbar(
        ax.scatter(pc1, pc2, c=times, cmap='viridis', s=25, zorder=3),
        ax=ax,
        label=unit,
    )
    ax.set(
        xlabel=f'PC 1 ({explained[0]:.0%} of variance)',
        ylabel=f'PC 2 ({explained[1]:.0%} of variance)',
        title='[CLS] trajectory (PCA projection)',
    )
    _save(ax.figure, out / 'trajectory_pca.png')

    # displacement and energy
    disp = states.diff(dim=0).flatten(1).norm(dim=1)
    energy = states.flatten(1).pow(2).sum(1)
    ax1 = Figure(figsize=(5.5, 4)).subplots()
    ax1.plot(times[1:], disp, 'o-', color='tab:blue')
    ax1.set(xlabel=unit, title='Per-step displacement and energy')
    ax1.set_ylabel('displacement ‖X(t_k+1) − X(t_k)‖', color='tab:blue')
    ax2 = ax1.twinx()
    ax2.plot(times, energy, 's-', color='tab:red')
    ax2.set_ylabel('energy ‖X‖²', color='tab:red')
    _save(ax1.figure, out / 'dynamics.png')

    # Lyapunov growth
    ax = Figure(figsize=(5.5, 4)).subplots()
    ax.plot(range(1, len(growth) + 1), growth, 'o-')
    ax.axhline(0, color='0.5', lw=0.8)
    ax.set(xlabel='step', ylabel='log ‖v_k+1‖ / ‖v_k‖',
           title=f'Tangent growth of the [CLS] trajectory: λ_max = {lam:.3f}')
    _save(ax.figure, out / 'lyapunov.png')

    probs = logits.softmax(-1)[0]
    summary = {
        'prediction': int(probs.argmax()),
        'confidence': float(probs.max()),
        'time_points': times.tolist(),
        'lyapunov_exponent': lam,
        'lyapunov_log_growth': growth.tolist(),
        'displacement': disp.tolist(),
        'energy': energy.tolist(),
        'cls_attention_entropy': torch.special.entr(mass.flatten(1)).sum(1).tolist(),
        'mass_patches': masks.flatten(1).sum(1).tolist(),
        'mass_q': mass_q,
        'nfe': int(getattr(model, 'nfe', 0)),
        'figures': [
            'attention_over_time.png',
            'trajectory_pca.png',
            'dynamics.png',
            'lyapunov.png',
        ],
    }
    write_atomic(out / 'summary.json', json.dumps(_finite_or_none(summary), indent=2))
    return summary


def _save(fig, path: pathlib.Path) -> None:
    fig.tight_layout()
    fig.savefig(png := io.BytesIO(), format='png', dpi=100)
    write_atomic(path, png.getvalue())


def _finite_or_none(obj):
    """JSON has no NaN/Inf: write them as null."""
    if isinstance(obj, dict):
        return {k: _finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite_or_none(v) for v in obj]
    return None if isinstance(obj, float) and not math.isfinite(obj) else obj


def inspect_parser() -> argparse.ArgumentParser:
    """odevit-inspect's command line."""
    p = argparse.ArgumentParser(prog='odevit-inspect', description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        '--model',
        required=True,
        help="timm model name, local-dir:FOLDER or hf-hub:ORG/NAME of a "
        'continuous-depth model (odevit_*, bvit_*, vit_odeified)',
    )
    weights = p.add_mutually_exclusive_group()  # both give weights
    weights.add_argument(
        '--checkpoint',
        help='train.py checkpoint (rebuilt with its own --model-kwargs; the '
        'weights its run selected on) or a state dict file of --model; read weights_only',
    )
    weights.add_argument('--pretrained', action='store_true', help="load --model's pretrained weights")
    p.add_argument('--image', required=True, help='image file to follow through the model')
    p.add_argument('--out', required=True, help='folder for the figures and summary.json (created)')
    p.add_argument(
        '--mass-q',
        type=float,
        default=0.9,
        help='fraction of the [CLS] attention mass the contour holds, in (0, 1] (default: 0.9)',
    )
    p.add_argument(
        '--lyapunov-steps',
        type=int,
        default=24,
        help='RK4 steps of the tangent integration for the Lyapunov exponent, >= 1 (default: 24)',
    )
    return p


def _build_model(p: argparse.ArgumentParser, args):
    import timm
    from .checkpoint import check_model_source, model_from_checkpoint
    try:
        # a bad local-dir: config.json named before timm's loader reads it
        check_model_source(args.model)
        if args.checkpoint:
            return model_from_checkpoint(args.checkpoint, model_name=args.model)[0]
        return timm.create_model(args.model, pretrained=args.pretrained)
    except RuntimeError as e:  # timm: unknown model name
        p.error(f'--model {args.model}: {e}')
    except (ValueError, KeyError, TypeError, OSError) as e:
        p.error(
            f'{"--checkpoint" if args.checkpoint else "--model"}: {e.args[0] if isinstance(e, KeyError) else e}'
        )


def main(argv: Optional[list] = None) -> None:
    p = inspect_parser()
    args = p.parse_args(argv)
    if not (0 < args.mass_q <= 1):  # NaN fails too
        p.error(f'--mass-q must be in (0, 1], got {args.mass_q}')
    if args.lyapunov_steps < 1:
        p.error(f'--lyapunov-steps must be >= 1, got {args.lyapunov_steps}')
    if pathlib.Path(args.out).is_file():
        p.error(f'--out {args.out} is a file, not a folder')
    model = _build_model(p, args)
    if not isinstance(getattr(model, 'blocks', None), ContinuousDepthStack):
        p.error(
            f'--model {args.model} has no ODE trajectory to inspect (use an odevit_*, bvit_* or vit_odeified model)'
        )
    try:
        x = load_image(args.image, model)
    except ValueError as e:
        p.error(f'--image: {e}')
    summary = inspect_image(model, x, args.out, args.mass_q, lyapunov_steps=args.lyapunov_steps)
    print(
        json.dumps(
            {k: summary[k] for k in ('prediction', 'confidence', 'lyapunov_exponent', 'figures')}
        )
    )


if __name__ == '__main__':
    main()
