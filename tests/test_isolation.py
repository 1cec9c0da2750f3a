"""``import timm_odevit`` and its tools change nothing outside the package: timm, torch, huggingface_hub
and matplotlib behave for the user's other models and plots exactly as without us."""
import subprocess
import sys
import textwrap

import pytest


def _run(code: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, '-c', textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def test_import_replaces_no_function_of_timm_torch_hf_or_matplotlib():
    _run('''
        import sys
        import huggingface_hub, matplotlib, timm, timm.models, timm.models._factory, timm.models._hub, torch
        matplotlib.use('svg')
        PACKAGES = ('timm', 'torch', 'huggingface_hub', 'matplotlib', 'safetensors', 'PIL')
        def snapshot():
            return {(name, attr): id(value) for name, module in list(sys.modules.items())
                    if module is not None and name.split('.')[0] in PACKAGES
                    for attr, value in list(vars(module).items()) if callable(value)}
        before = snapshot()
        import timm_odevit
        after = snapshot()
        changed = sorted(key for key, ident in before.items() if after.get(key) != ident)
        assert not changed, changed
        assert timm.models._factory.load_model_config_from_hf is timm.models._hub.load_model_config_from_hf
        assert timm.models._factory.load_model_config_from_path is timm.models._hub.load_model_config_from_path
        assert matplotlib.get_backend() == 'svg'
    ''')


def test_other_models_raise_timms_own_errors(tmp_path):
    (tmp_path / 'config.json').write_text('{"num_classes": 10}')  # a local-dir: config without "architecture"
    _run(f'''
        import os
        os.environ['HF_HUB_OFFLINE'] = '1'
        import timm, timm_odevit
        from huggingface_hub.errors import HFValidationError
        try:
            timm.create_model('hf-hub:not a valid//repo id')
        except HFValidationError:
            pass
        else:
            raise AssertionError('no HFValidationError')
        try:
            timm.create_model('local-dir:{tmp_path}')
        except KeyError as e:
            assert 'architecture' in str(e)
        else:
            raise AssertionError('no KeyError')
    ''')


def test_plots_leave_the_matplotlib_backend_alone(tmp_path):
    pytest.importorskip('matplotlib')
    _run(f'''
        import matplotlib
        matplotlib.use('svg')
        import pathlib, timm, torch
        from timm_odevit import inspect_cli
        from tools.card_extras import plot_learning_curve
        plot_learning_curve([{{'epoch': 0, 'eval_top1': 10.}}, {{'epoch': 1, 'eval_top1': 20.}}],
                            pathlib.Path('{tmp_path}') / 'curve.png', 'curve')
        model = timm.create_model('odevit_tiny_cifar', steps=2)
        inspect_cli.inspect_image(model, torch.randn(1, 3, 32, 32), '{tmp_path / "inspect"}')
        assert matplotlib.get_backend() == 'svg', matplotlib.get_backend()
        assert (pathlib.Path('{tmp_path}') / 'curve.png').read_bytes()[:4] == b'\\x89PNG'
        assert (pathlib.Path('{tmp_path}') / 'inspect' / 'lyapunov.png').read_bytes()[:4] == b'\\x89PNG'
    ''')
