"""Evaluation helpers for continuous-depth and recurrent models."""
from typing import Dict, Iterable, List, Tuple

import torch


@torch.no_grad()
def accuracy_vs_iterations(
        model: torch.nn.Module,
        loader: Iterable[Tuple[torch.Tensor, torch.Tensor]],
        iterations: int,
        device=None,
) -> List[Dict[str, float]]:
    """Top-1 accuracy (%) at every time point up to ``iterations`` ("beyond the training horizon").

    Runs the model once per batch to the horizon ``iterations`` (``model.set_iterations``; the
    trained horizon is restored afterwards) and classifies every intermediate state with the
    final head (stage heads at their own stages). For a recurrent bViT, point k is iteration k;
    in the ODE regime point k is time k·h.

    Returns: [{'point': k, 'time': t_k, 'top1': acc}, ...] for k = 1..points.
    """
    if not hasattr(model, 'set_iterations') or not hasattr(model, 'forward_stages'):
        raise TypeError(f'{type(model).__name__} has no iterations to vary (needs set_iterations and forward_stages)')
    trained = model.iterations
    was_training = model.training
    model.eval()
    try:
        model.set_iterations(iterations)
        points = model.num_time_points
        correct = torch.zeros(points, dtype=torch.long)
        total = 0
        for x, y in loader:
            if device is not None:
                x, y = x.to(device), y.to(device)
            logits = model.forward_stages(x, stages=range(1, points + 1))
            correct += torch.stack([(lg.argmax(-1) == y).sum() for lg in logits]).cpu()
            total += y.numel()
        if total == 0:
            raise ValueError('the loader yielded no samples')
        step = iterations / points
        return [{'point': k + 1, 'time': (k + 1) * step, 'top1': 100. * correct[k].item() / total}
                for k in range(points)]
    finally:
        model.set_iterations(trained)
        model.train(was_training)
