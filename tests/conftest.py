"""Test setup: register our models and bring in timm's own model tests for them."""
import os
import sys
import pathlib
import tempfile

import pytest

# Hub tests run timm's real Hugging Face path offline against a cache of our own: both variables
# are read when huggingface_hub is imported, so they are set before anything imports it.
HF_CACHE = tempfile.mkdtemp(prefix='timm_odevit_hf_cache_')
os.environ['HF_HUB_CACHE'] = HF_CACHE
os.environ['HF_HUB_OFFLINE'] = '1'

import timm_odevit  # noqa: E402,F401  (registers the models before any test module is collected)

UPSTREAM_DIR = pathlib.Path(__file__).parent / 'timm_upstream'
RELEASE_DIR = pathlib.Path(__file__).resolve().parents[1] / 'release'


def _install_releases() -> None:
    """Released folders into the session's HF cache under their hf_hub_id: pretrained=True on the
    registered tags then runs timm's real hub download code, offline."""
    from timm.models import get_pretrained_cfg
    from _hf_cache import install_in_hf_cache
    for config in sorted(RELEASE_DIR.glob('*/record.json')):  # releases; other folders (a teacher's cycles) are not
        cfg = get_pretrained_cfg(config.parent.name)  # the folder is named like its registered tag
        if cfg is None or not cfg.hf_hub_id:
            raise RuntimeError(f'{config.parent} has no registered tag with an hf_hub_id in default_cfgs')
        install_in_hf_cache(config.parent, cfg.hf_hub_id)


_install_releases()


def pytest_configure(config):
    if os.environ.get('TIMM_ODEVIT_SKIP_UPSTREAM') == '1':
        return
    sys.path.insert(0, str(UPSTREAM_DIR))
    from prepare import prepare
    try:
        prepare()
    except Exception as e:  # no silent skip: the upstream suite is part of the test command
        raise pytest.UsageError(
            f"Could not prepare timm's upstream model tests: {e}\n"
            'Set TIMM_ODEVIT_SKIP_UPSTREAM=1 to run without them (offline machines).') from e
