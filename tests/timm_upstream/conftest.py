"""Run timm's own model tests (generated file) on timm_odevit models only.

Items for timm's own models are deselected; tests that cannot apply to an ODE model are
skipped with the reason.
"""
import timm
import pytest

OUR_MODELS = set(timm.list_models(module=['odevit', 'bvit']))

NOT_APPLICABLE = {
    'test_model_forward_torchscript':
        "TorchScript cannot compile torchdiffeq's odeint (Python solver objects, dict options, callbacks); "
        'use torch.compile or torch.fx (both tested)',
    'test_model_forward_fx_torchscript':
        "TorchScript cannot compile torchdiffeq's odeint, which stays a leaf module in the FX graph",
}


def pytest_collection_modifyitems(config, items):
    keep, drop = [], []
    for item in items:
        if '_generated' not in str(item.path):
            keep.append(item)
            continue
        params = getattr(getattr(item, 'callspec', None), 'params', {})
        if params.get('model_name') not in OUR_MODELS:
            drop.append(item)
            continue
        reason = NOT_APPLICABLE.get(item.originalname)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))
        keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
