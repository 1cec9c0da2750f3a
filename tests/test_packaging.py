"""The released tiny weights ship inside the package: ``pretrained=True`` on a registered tag loads them with
no network, from a checkout and from a built wheel; the packaged files are the release files byte for byte."""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest
import timm
import torch

import timm_odevit  # noqa: F401
from timm.models import _builder
from timm_odevit.models._cfgs import PACKAGED_WEIGHTS_DIR, packaged_weights

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGED = ('odevit_tiny_cifar.c10', 'bvit_tiny_cifar.c10', 'odevit_tiny_convstem_cifar.c10_pnp')


def _release_logits(tag: str, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return timm.create_model(f'local-dir:{ROOT / "release" / tag}', pretrained=True).eval()(x)


@pytest.mark.parametrize('tag', PACKAGED)
def test_packaged_weights_are_the_release_files(tag):
    """One source of truth: the package's copy equals release/<tag>/model.safetensors (tools.cycle updates both)."""
    assert packaged_weights(tag).read_bytes() == (ROOT / 'release' / tag / 'model.safetensors').read_bytes()
    assert timm.models.get_pretrained_cfg(tag).file == str(packaged_weights(tag))
    assert timm.models.get_pretrained_cfg(tag).hf_hub_id == f'timm-odevit/{tag}'  # the Hub copy stays registered


def test_the_packaged_tags_are_the_releases():
    packaged = {n for n in timm.list_models(pretrained=True)
                if (timm.models.get_pretrained_cfg(n).file or '').startswith(str(PACKAGED_WEIGHTS_DIR))}
    ours = {m for module in ('odevit', 'bvit', 'odeified', 'baselines') for m in timm.list_models(module=module)}
    releases = {p.parent.name for p in (ROOT / 'release').glob('*/model.safetensors')}
    # release/ also holds weights of other models (the distillation teacher); those of our models ship
    assert packaged == set(PACKAGED) == {r for r in releases if r.split('.')[0] in ours}


@pytest.mark.parametrize('tag', PACKAGED)
def test_the_registered_tag_names_its_classes_as_its_release_does(tag):
    """pretrained_cfg['label_names'] names the predictions by tag as by local-dir: (the release's config.json)."""
    saved = json.loads((ROOT / 'release' / tag / 'config.json').read_text())['label_names']
    assert list(timm.create_model(tag, pretrained=True).pretrained_cfg['label_names']) == saved


@pytest.mark.parametrize('tag', PACKAGED)
def test_registered_tag_loads_the_packaged_file_not_the_hub(tag, monkeypatch):
    def no_hub(*args, **kwargs):
        raise AssertionError('the registered tag went to the Hub')
    monkeypatch.setattr(_builder, 'load_state_dict_from_hf', no_hub)
    x = torch.randn(2, 3, 32, 32)
    model = timm.create_model(tag, pretrained=True).eval()
    with torch.no_grad():
        torch.testing.assert_close(model(x), _release_logits(tag, x), rtol=0, atol=0)


@pytest.mark.parametrize('tag', PACKAGED)
def test_the_registered_tag_re_exported_with_save_for_hf_keeps_its_released_settings(tag, tmp_path):
    """The settings a tag's weights were trained with (odevit_tiny_cifar.c10: Euler 6, the registered default is 12)
    are construction args: save_for_hf exports them, so the re-exported folder gives the same logits."""
    from timm.models import save_for_hf
    x = torch.randn(2, 3, 32, 32)
    model = timm.create_model(tag, pretrained=True).eval()
    save_for_hf(model, tmp_path, safe_serialization=True)
    again = timm.create_model(f'local-dir:{tmp_path}', pretrained=True).eval()
    assert again.blocks.solver == model.blocks.solver
    with torch.no_grad():
        torch.testing.assert_close(again(x), model(x), rtol=0, atol=0)
    if tag == 'odevit_tiny_cifar.c10':
        assert model._model_args['steps'] == len(again.blocks) == 6
        assert timm.create_model(tag, pretrained=True, steps=4)._model_args['steps'] == 4  # explicit kwargs win


@pytest.mark.parametrize('tag', PACKAGED)
def test_explicit_hf_hub_name_still_loads_from_the_hub(tag, monkeypatch):
    """hf-hub: names bypass the packaged file (timm: source 'hf-hub'); offline, from the session's cache (conftest)."""
    calls = []
    real = _builder.load_state_dict_from_hf
    monkeypatch.setattr(_builder, 'load_state_dict_from_hf', lambda *a, **k: calls.append(a) or real(*a, **k))
    x = torch.randn(2, 3, 32, 32)
    model = timm.create_model(f'hf-hub:timm-odevit/{tag}', pretrained=True).eval()
    assert calls and calls[0][0] == f'timm-odevit/{tag}'
    assert 'file' not in model.pretrained_cfg
    with torch.no_grad():
        torch.testing.assert_close(model(x), _release_logits(tag, x), rtol=0, atol=0)


def test_missing_packaged_file_falls_back_to_hf_hub_id(tmp_path, monkeypatch):
    from timm_odevit.models import _cfgs
    monkeypatch.setattr(_cfgs, 'PACKAGED_WEIGHTS_DIR', tmp_path)
    cfg = _cfgs.cifar_cfg(hf_hub_id='timm-odevit/odevit_tiny_cifar.c10', packaged='odevit_tiny_cifar.c10')
    assert 'file' not in cfg and cfg['hf_hub_id'] == 'timm-odevit/odevit_tiny_cifar.c10'
    (tmp_path / 'odevit_tiny_cifar.c10').mkdir()
    (tmp_path / 'odevit_tiny_cifar.c10' / 'model.safetensors').write_bytes(b'x')
    assert _cfgs.cifar_cfg(packaged='odevit_tiny_cifar.c10')['file'] == str(
        tmp_path / 'odevit_tiny_cifar.c10' / 'model.safetensors')


@pytest.fixture(scope='module')
def wheel(tmp_path_factory):
    """A wheel built from a copy of the checkout with its release tooling (tools/: not to be installed), no
    network (the shared checkout gets no build/ folder)."""
    tmp = tmp_path_factory.mktemp('wheel')
    src = tmp / 'src'
    src.mkdir()
    for name in ('pyproject.toml', 'README.md'):
        shutil.copy(ROOT / name, src / name)
    for name in ('timm_odevit', 'tools'):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns('__pycache__'))
    run = subprocess.run([sys.executable, '-m', 'pip', 'wheel', str(src), '--no-deps', '--no-build-isolation',
                          '--no-index', '-q', '-w', str(tmp / 'dist')], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return next((tmp / 'dist').glob('timm_odevit-*.whl'))


def test_wheel_contains_the_release_weights_and_no_release_tooling(wheel):
    with zipfile.ZipFile(wheel) as z:
        for tag in PACKAGED:
            for name in ('model.safetensors', 'config.json'):
                data = z.read(f'timm_odevit/weights/{tag}/{name}')
                assert data == (ROOT / 'release' / tag / name).read_bytes(), (tag, name)
        names = z.namelist()
        entry_points = z.read(next(n for n in names if n.endswith('entry_points.txt'))).decode()
        metadata = z.read(next(n for n in names if n.endswith('METADATA'))).decode()
    tooling = ('cycle.py', 'speed.py', 'holdout_split.py')
    assert not [n for n in names if n.startswith('tools/') or n.split('/')[-1] in tooling], names
    assert 'odevit-cycle' not in entry_points and 'holdout' not in entry_points
    assert 'odevit-export = timm_odevit.hub:export_main' in entry_points
    assert 'License-Expression: Apache-2.0' in metadata  # an SPDX string: no setuptools deprecation warning


def test_installed_wheel_gives_the_release_logits_offline(wheel, tmp_path):
    """pip install of the wheel (into a target folder, first on the path), an empty HF cache, HF_HUB_OFFLINE:
    the registered tags load and give the release's logits."""
    site = tmp_path / 'site'
    run = subprocess.run([sys.executable, '-m', 'pip', 'install', '--no-deps', '--no-index', '-q', '--target',
                          str(site), str(wheel)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    x = torch.randn(2, 3, 32, 32)
    torch.save(x, tmp_path / 'x.pt')
    code = (
        'import sys, timm, torch, timm_odevit\n'
        f'assert timm_odevit.__file__.startswith({str(site)!r}), timm_odevit.__file__\n'
        f'x = torch.load({str(tmp_path / "x.pt")!r})\n'
        'out = {}\n'
        f'for tag in {PACKAGED!r}:\n'
        '    with torch.no_grad():\n'
        '        out[tag] = timm.create_model(tag, pretrained=True).eval()(x)\n'
        f'torch.save(out, {str(tmp_path / "out.pt")!r})\n')
    env = dict(os.environ, PYTHONPATH=str(site), HF_HUB_OFFLINE='1', HF_HUB_CACHE=str(tmp_path / 'empty_cache'))
    run = subprocess.run([sys.executable, '-c', code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    out = torch.load(tmp_path / 'out.pt')
    for tag in PACKAGED:
        torch.testing.assert_close(out[tag], _release_logits(tag, x), rtol=0, atol=0, msg=tag)
