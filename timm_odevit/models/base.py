"""The continuous-depth mixin: what a timm ViT whose ``blocks`` is a :class:`ContinuousDepthStack` derives from its
stack. Both model families (:class:`ContinuousDepthViT`) and :func:`odeify`'s models are built on it."""
import types
from typing import Any, Dict, List, Union

from .._compat import TimmModelArgs
from ..layers import ContinuousDepthStack
from ..layers.solver import flat_solver_kwargs

__all__ = ['ContinuousDepthMixin']


class ContinuousDepthMixin(TimmModelArgs):
    """For a timm ``VisionTransformer`` subclass whose ``blocks`` is a :class:`ContinuousDepthStack`: what timm
    reads off the model after construction, derived from the stack when it is read, so that it follows every later
    change of the depth (``set_solver``, ``set_train_depth``, pruning), whether made through the model or its
    ``blocks``:

    - ``feature_info``: one entry per interval, ``blocks.i``, as timm's ViT lists its blocks;
    - the construction args timm's ``create_model`` recorded (what ``save_for_hf`` exports), with the stack's
      current solver settings over them (:meth:`model_args`);
    - ``prune_intermediate_layers``: timm's, with the stack cut in place.
    """

    # create_model's record (record_model_args)
    recorded_args: Dict[str, Any] = types.MappingProxyType({})

    @property
    def feature_info(self) -> List[Dict[str, Any]]:
        embed = self.patch_embed
        reduction = embed.feat_ratio() if hasattr(embed, 'feat_ratio') else embed.patch_size
        return [
            dict(module=f'blocks.{i}', num_chs=self.embed_dim, reduction=reduction)
            for i in range(len(self.blocks))
        ]

    @feature_info.setter
    def feature_info(self, info: List[Dict[str, Any]]) -> None:
        """Ignored: timm's ``VisionTransformer.__init__`` sets the list of the blocks it builds; here it is derived
        from the stack."""

    def depth_args(self) -> Dict[str, Any]:
        """The depth's current settings as this model's kwargs (None: drop the kwarg): the solver as flat kwargs
        (:func:`~timm_odevit.layers.solver.flat_solver_kwargs`) and ``train_depth``."""
        stack = self.blocks
        return dict(
            **flat_solver_kwargs(stack.solver),
            train_depth=list(stack.train_depth) if stack.train_depth else None,
        )

    def model_args(self) -> Dict[str, Any]:
        """The kwargs that rebuild this model: those timm's ``create_model`` recorded, with the depth's current
        settings (:meth:`depth_args`) over the recorded ones."""
        # replaced, e.g. by nn.Sequential(*intervals)
        if not isinstance(self.blocks, ContinuousDepthStack):
            return dict(self.recorded_args)
        depth = self.depth_args()
        # (depth names every solver kwarg: flat_solver_kwargs gives them all)
        args = {k: v for k, v in self.recorded_args.items() if k not in depth}
        args.update({k: v for k, v in depth.items() if v is not None})
        return args

    def record_model_args(self, args: Dict[str, Any]) -> None:
        """Record the kwargs the model was created with (timm's ``create_model`` records them after construction)."""
        self.recorded_args = dict(args)

    def prune_intermediate_layers(
            self,
            indices: Union[int, List[int]] = 1,
            prune_norm: bool = False,
            prune_head: bool = True,
    ):
        """timm's, but the stack is cut in place (``blocks.truncate``) instead of replaced by a slice: the model keeps
        its stack, so its hooks, ``feature_info``, later ``set_solver`` calls and the exported model args stay in
        step."""
        stack = self.blocks
        take_indices = super().prune_intermediate_layers(
            indices, prune_norm=prune_norm, prune_head=prune_head
        )
        kept = len(self.blocks)
        self.blocks = stack
        if kept != len(stack):
            stack.truncate(kept)
        return take_indices
