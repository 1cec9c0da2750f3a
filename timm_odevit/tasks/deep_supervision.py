"""Stage-wise deep supervision as a timm TrainingTask."""
from typing import Callable, Dict, Sequence

import torch
from torch import nn
from timm.task import ClassificationTask
from timm.utils import unwrap_model


def deep_supervision_loss(
        stage_logits: Sequence[torch.Tensor],
        target: torch.Tensor,
        criterion: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        weights: Sequence[float],
) -> torch.Tensor:
    """L = Σ_k w_k · criterion(logits_k, target) over the supervised stages k."""
    if len(stage_logits) != len(weights):
        raise ValueError(f'{len(stage_logits)} stage outputs but {len(weights)} stage weights')
    return sum(w * criterion(logits, target) for w, logits in zip(weights, stage_logits))


class DeepSupervisionTask(ClassificationTask):
    """Classification loss at every stage of a staged model (e.g. :class:`timm_odevit.BViT` with
    ``stages=(3, 6, 9, 12)``).

    The task switches the model's ``stage_outputs`` on, so its training forward returns one
    logits tensor per stage (eval forward is unchanged); the loss is ``deep_supervision_loss``
    with the model's ``stage_weights``. The model is called through its (DDP) wrapper, so every
    stage head gets gradients on all ranks. ``output`` is the last stage's logits. Stages beyond the model's time
    points (a horizon shortened by ``set_iterations``) are refused by its ``forward_stages`` at the first step.
    """

    def __init__(self, model: nn.Module, *args, **kwargs):
        inner = unwrap_model(model)
        if not hasattr(inner, 'stage_outputs'):
            raise TypeError(
                f'{type(inner).__name__} has no stages (stage_outputs, stage_weights): use e.g. bvit_*'
            )
        inner.stage_outputs = True
        super().__init__(model, *args, **kwargs)

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> Dict[str, torch.Tensor]:
        output = self.trainable_module(input)
        if torch.is_tensor(output):  # eval mode: the final logits only
            return {'loss': self.criterion(output, target), 'output': output}
        weights = unwrap_model(self.trainable_module).stage_weights
        loss = deep_supervision_loss(output, target, self.criterion, weights)  # one logits tensor per stage
        return {'loss': loss, 'output': output[-1]}
