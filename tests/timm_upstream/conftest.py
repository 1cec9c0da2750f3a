"""Run timm's own model tests (generated file) on timm_odevit models only.

Items for timm's own models are deselected; tests that cannot apply to an ODE model are
skipped with the reason.
"""
import os

import timm
import pytest
from timm.models import get_pretrained_cfg_value, model_entrypoint, split_model_name_tag

import timm_odevit  # noqa: F401  (registers the families)

# every model this package registers, whichever module of it defines the model
OUR_MODELS = {name for name in timm.list_models() if model_entrypoint(name).__module__.startswith('timm_odevit.')}

NOT_APPLICABLE = {
    'test_model_forward_torchscript':
        "TorchScript cannot compile torchdiffeq's odeint (Python solver objects, dict options, callbacks); "
        'use torch.compile or torch.fx (both tested)',
    'test_model_forward_fx_torchscript':
        "TorchScript cannot compile torchdiffeq's odeint, which stays a leaf module in the FX graph",
}


# timm marks this test "slow (prunes every model at every feature index), excluded from CI"; we run it
# on the 32 px models always and on the 224 px ones with TIMM_ODEVIT_FULL_UPSTREAM=1.
SLOW_AT_224 = {'test_prune_intermediate_layers_contract'}
FULL = os.environ.get('TIMM_ODEVIT_FULL_UPSTREAM') == '1'


def pytest_collection_modifyitems(config, items):
    keep, drop = [], []
    for item in items:
        if '_generated' not in str(item.path):
            keep.append(item)
            continue
        params = getattr(getattr(item, 'callspec', None), 'params', {})
        if split_model_name_tag(params.get('model_name', ''))[0] not in OUR_MODELS:  # tagged names too
            drop.append(item)
            continue
        reason = NOT_APPLICABLE.get(item.originalname)
        big = max(get_pretrained_cfg_value(params['model_name'], 'input_size')[-2:]) > 64
        if not reason and big and not FULL and item.originalname in SLOW_AT_224:
            reason = ('slow at 224 px (timm excludes it from its own CI); covered at 32 px, '
                      'run with TIMM_ODEVIT_FULL_UPSTREAM=1')
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))
        keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
