"""Deployment like a timm ViT: torch.export and the dynamo ONNX exporter give eager's logits for fixed-grid
and recurrent models; adaptive solvers refuse with a clear error."""
import pytest
import timm
import torch

import timm_odevit  # noqa: F401

EXPORTABLE = {
    'odevit_tiny_cifar': dict(steps=6),
    'bvit_tiny_cifar': dict(),
    'bvit_tiny_cifar@ode_rk4': dict(regime='ode', solver='rk4', steps=3),
    'vit_odeified': dict(base='vit_tiny_patch16_224', img_size=32, patch_size=8, depth=3, num_classes=10),
}


def _model(key: str):
    torch.manual_seed(0)
    return timm.create_model(key.split('@')[0], **EXPORTABLE[key]).eval()


def _x():
    torch.manual_seed(1)
    return torch.randn(2, 3, 32, 32)


@pytest.mark.parametrize('key', EXPORTABLE)
def test_torch_export_gives_eager_logits(key):
    model, x = _model(key), _x()
    program = torch.export.export(model, (x,))
    with torch.no_grad():
        torch.testing.assert_close(program.module()(x), model(x), rtol=1e-5, atol=1e-5)


def test_the_exported_graph_does_not_check_finiteness():
    # eager raises FloatingPointError for a NaN state; the exported graph propagates it, as timm's ViT does
    model, x = _model('odevit_tiny_cifar'), _x()
    program = torch.export.export(model, (x,))
    bad = x.clone()
    bad[0, 0, 0, 0] = float('nan')
    with pytest.raises(FloatingPointError):
        model(bad)
    out = program.module()(bad)
    assert torch.isnan(out[0]).all() and torch.isfinite(out[1]).all()


@pytest.mark.parametrize('method', ['dopri5', 'explicit_adams'])
def test_adaptive_and_multistep_solvers_refuse_export(method):
    model = timm.create_model('odevit_tiny_cifar', solver=method, steps=3).eval()
    with pytest.raises(Exception, match='cannot be exported: only fixed-grid Runge'):
        torch.export.export(model, (_x(),))


@pytest.mark.parametrize('key', ['odevit_tiny_cifar', 'bvit_tiny_cifar', 'vit_odeified'])
def test_dynamo_onnx_export_runs_in_onnxruntime_with_eager_logits(key, tmp_path):
    ort = pytest.importorskip('onnxruntime')
    pytest.importorskip('onnxscript')
    model, x = _model(key), _x()
    program = torch.onnx.export(model, (x,), dynamo=True, verbose=False)
    path = tmp_path / 'model.onnx'
    program.save(str(path))
    session = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
    (logits,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    with torch.no_grad():
        torch.testing.assert_close(torch.from_numpy(logits), model(x), rtol=1e-4, atol=1e-4)
