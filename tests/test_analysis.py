import json
import os
import re
import pathlib

import pytest
import timm
import torch

import timm_odevit  # noqa: F401
from timm_odevit import analysis
from timm_odevit.models import embed_tokens
from timm_odevit.inspect_cli import inspect_image, load_image, main as inspect_main

CAT = pathlib.Path(__file__).resolve().parents[1].parent / 'shared' / 'data' / 'cifar10' / 'test' / 'cat' / '00000.png'


@pytest.fixture(scope='module')
def model():
    torch.manual_seed(0)
    return timm.create_model('odevit_tiny_cifar', steps=6).eval()


@pytest.fixture(scope='module')
def image(model):
    if not CAT.is_file():
        pytest.skip(f'{CAT} not found')
    return load_image(str(CAT), model)


def test_trajectory_and_attention_shapes(model, image):
    states = analysis.trajectory(model, image)
    assert states.shape == (7, 1, 75, 256)
    torch.testing.assert_close(states[-1], model.blocks(embed_tokens(model, image)))
    maps = analysis.attention_maps(model, states)
    assert maps.shape == (7, 1, 4, 75, 75)
    torch.testing.assert_close(maps.sum(-1), torch.ones(7, 1, 4, 75))
    mass = analysis.cls_attention_mass(model, maps)
    assert mass.shape == (7, 1, 8, 8)
    torch.testing.assert_close(mass.sum((-2, -1)), torch.ones(7, 1))
    with pytest.raises(ValueError, match='pass grid'):
        analysis.cls_attention_mass(model, maps[..., :-16, :-16])  # the maps of a smaller input
    assert analysis.cls_attention_mass(model, maps[..., :-16, :-16], grid=(6, 8)).shape == (7, 1, 6, 8)
    assert analysis.depth_stack(model).solver.grid().tolist() == pytest.approx([k / 6 for k in range(7)])


def test_mass_mask_is_the_smallest_set():
    mass = torch.tensor([[0.5, 0.3], [0.15, 0.05]])
    assert analysis.mass_mask(mass, 0.75).tolist() == [[True, True], [False, False]]
    assert analysis.mass_mask(mass, 0.9).tolist() == [[True, True], [True, False]]


@pytest.mark.parametrize('A,expected', [
    ([[0.3, 1.0], [-1.0, 0.3]], 0.3),                       # spiral: Re λ = 0.3
    ([[-0.5, 0., 0.], [0., 0.2, 0.], [0., 0., -1.0]], 0.2),  # diagonal: max λ = 0.2
    ([[-1.0, 2.0], [0.0, -0.4]], -0.4),                      # non-normal, stable
])
def test_lyapunov_exponent_of_a_linear_field(A, expected):
    A = torch.tensor(A, dtype=torch.float64)
    x0 = torch.randn(1, 1, A.shape[0], dtype=torch.float64)
    lam, growth = analysis.lyapunov_exponent_of_field(lambda z: z @ A.T, x0, t_end=40., steps=400, transient=0.25)
    assert lam == pytest.approx(expected, abs=0.02)
    assert growth.shape == (400,)


def test_model_diagnostics(model, image):
    lam, growth = analysis.lyapunov_exponent(model, image)
    assert growth.shape == (24,) and abs(lam) < 100
    L = analysis.lipschitz_estimate(model, image, iters=5)
    bound = analysis.euler_error_bound(model, image, lipschitz=L)
    assert L > 0 and bound['bound'] > 0 and bound['steps'] == 6


def test_lipschitz_estimate_matches_a_known_jacobian():
    W = torch.tensor([[2.0, 0.], [0., 0.5]])
    f = lambda z: z @ W.T  # noqa: E731
    assert analysis._spectral_norm_of_jacobian(f, torch.randn(1, 3, 2)) == pytest.approx(2.0, rel=1e-4)


def test_bvit_over_iterations(image):
    bvit = timm.create_model('bvit_tiny_cifar').eval()
    states = analysis.trajectory(bvit, image)
    assert states.shape == (13, 1, 65, 192)
    assert analysis.attention_maps(bvit, states).shape == (13, 1, 3, 65, 65)
    lam, growth = analysis.lyapunov_exponent(bvit, image)
    assert growth.shape == (12,)
    bound = analysis.euler_error_bound(bvit, image, lipschitz=1.)  # the recurrence: Euler, h = 1, on B(z) - z
    assert bound['steps'] == 12 and bound['bound'] > 0


def _old_lyapunov(f, x0, t_end, steps, discrete, token=0, seed=0):
    """The loop analysis.py had before it used torchdiffeq: classic RK4 (or the map), tangent renormalised per step."""
    g = torch.Generator().manual_seed(seed)
    v = torch.zeros_like(x0)
    v[:, token] = torch.randn(x0.shape, generator=g, dtype=x0.dtype)[:, token]
    v = v / v.norm()
    x, h, growth = x0, t_end / steps, []
    rhs = lambda x, v: torch.func.jvp(f, (x,), (v,))  # noqa: E731
    for _ in range(steps):
        if discrete:
            fx, jv = rhs(x, v)
            x, v = x + fx, v + jv
        else:
            k1 = rhs(x, v)
            k2 = rhs(x + h / 2 * k1[0], v + h / 2 * k1[1])
            k3 = rhs(x + h / 2 * k2[0], v + h / 2 * k2[1])
            k4 = rhs(x + h * k3[0], v + h * k3[1])
            x = x + h / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
            v = v + h / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
        growth.append(torch.log(v.norm()).item())
        v = v / v.norm()
    return sum(growth) / t_end, torch.tensor(growth, dtype=torch.float64)


@pytest.mark.parametrize('discrete', [False, True])
def test_lyapunov_exponent_matches_the_renormalised_loop_it_replaced(discrete):
    """odeint on (state, tangent) without renormalising = the old per-step renormalised loop (the tangent equation
    is linear); RK4's 3/8 rule (torchdiffeq's) and the classic one agree to the method's accuracy."""
    A = torch.randn(6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    f = lambda z: torch.tanh(z @ A)  # noqa: E731
    x0 = torch.randn(1, 3, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    t_end, steps = (8., 8) if discrete else (2., 40)
    lam, growth = analysis.lyapunov_exponent_of_field(f, x0, t_end, steps, discrete=discrete)
    old_lam, old_growth = _old_lyapunov(f, x0, t_end, steps, discrete)
    tol = 1e-12 if discrete else 1e-6
    torch.testing.assert_close(growth.double(), old_growth, rtol=tol, atol=tol)
    assert lam == pytest.approx(old_lam, rel=tol, abs=tol)


def test_inspect_writes_readable_figures(model, image, tmp_path):
    summary = inspect_image(model, image, str(tmp_path))
    for name in summary['figures']:
        png = tmp_path / name
        assert png.stat().st_size > 5000 and png.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    data = json.loads((tmp_path / 'summary.json').read_text())
    assert len(data['time_points']) == 7 and 'lyapunov_exponent' in data


def test_inspect_cut_off_keeps_the_old_figures(model, image, tmp_path, monkeypatch):
    """Each figure is written whole or not at all: a run killed while writing leaves the earlier run's file."""
    old = tmp_path / 'attention_over_time.png'
    old.write_bytes(b'earlier run')

    def killed(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, 'replace', killed)
    with pytest.raises(KeyboardInterrupt):
        inspect_image(model, image, str(tmp_path))
    assert old.read_bytes() == b'earlier run' and [p.name for p in tmp_path.iterdir()] == [old.name]


def test_inspect_reads_a_greyscale_model_its_luminance(tmp_path):
    """A one-channel model gets the image's luminance (it was handed three channels), and its figures draw."""
    from PIL import Image
    path = tmp_path / 'img.png'
    Image.new('RGB', (32, 32), (200, 100, 50)).save(path)
    grey = timm.create_model('odevit_tiny_cifar', in_chans=1, steps=2).eval()
    x = load_image(str(path), grey)
    cfg = grey.pretrained_cfg
    luminance = Image.open(path).convert('L').getpixel((0, 0)) / 255
    torch.testing.assert_close(x, torch.full((1, 1, 32, 32), (luminance - cfg['mean'][0]) / cfg['std'][0]))
    summary = inspect_image(grey, x, str(tmp_path / 'out'), lyapunov_steps=2)
    assert all((tmp_path / 'out' / name).is_file() for name in summary['figures'])
    with pytest.raises(ValueError, match='reads 4-channel images; inspect reads RGB or greyscale images only'):
        load_image(str(path), timm.create_model('odevit_tiny_cifar', in_chans=4, steps=2))


def test_inspect_command(tmp_path, capsys):
    if not CAT.is_file():
        pytest.skip(f'{CAT} not found')
    inspect_main(['--model', 'odevit_tiny_cifar', '--image', str(CAT), '--out', str(tmp_path)])
    assert len(list(tmp_path.glob('*.png'))) >= 3 and (tmp_path / 'summary.json').exists()


def _cli_error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        inspect_main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert 'Traceback' not in err
    return err.strip().splitlines()[-1]


def test_bad_input(tmp_path, model, capsys):
    bad = tmp_path / 'not_an_image.png'
    bad.write_text('hello')
    with pytest.raises(ValueError, match='cannot read image'):
        load_image(str(bad), model)
    err = _cli_error(['--model', 'odevit_tiny_cifar', '--image', str(tmp_path / 'missing.png'), '--out', str(tmp_path)],
                     capsys)
    assert 'odevit-inspect: error: --image: cannot read image' in err
    err = _cli_error(['--model', 'resnet18', '--image', str(CAT), '--out', str(tmp_path)], capsys)
    assert 'error: --model resnet18 has no ODE trajectory' in err
    with pytest.raises(TypeError, match='no ODE trajectory'):
        analysis.trajectory(timm.create_model('vit_tiny_cifar_flops_matched'), torch.randn(1, 3, 32, 32))


@pytest.mark.parametrize('extra,words', [
    (['--mass-q', 'nan'], r'--mass-q must be in \(0, 1\], got nan'),
    (['--mass-q', '1.5'], r'--mass-q must be in \(0, 1\], got 1.5'),
    (['--mass-q', '0'], r'--mass-q must be in'),
    (['--lyapunov-steps', '0'], r'--lyapunov-steps must be >= 1'),
    (['--checkpoint', '{tmp}'], r'--checkpoint: checkpoint .* is a directory'),
    (['--checkpoint', '{tmp}', '--pretrained'], r'argument --pretrained: not allowed with argument --checkpoint'),
    (['--model', 'no_such_model'], r'--model no_such_model: Unknown model'),
    (['--out', '{tmp}/file'], r'--out .*file is a file'),
])
def test_inspect_cli_errors_name_the_argument(tmp_path, capsys, extra, words):
    (tmp_path / 'file').write_text('x')
    image = tmp_path / 'img.png'
    from PIL import Image
    Image.new('RGB', (32, 32), (10, 20, 30)).save(image)
    argv = ['--model', 'odevit_tiny_cifar', '--image', str(image), '--out', str(tmp_path / 'out')]
    argv += [a.replace('{tmp}', str(tmp_path)) for a in extra]
    assert re.search(f'odevit-inspect: error: {words}', _cli_error(argv, capsys))


def test_inspect_cli_bad_local_dir_config_names_the_file(tmp_path, capsys):
    (tmp_path / 'm').mkdir()
    (tmp_path / 'm' / 'config.json').write_text('{bad')
    err = _cli_error(['--model', f'local-dir:{tmp_path / "m"}', '--image', 'x.png', '--out', str(tmp_path / 'o')], capsys)
    assert 'odevit-inspect: error: --model' in err and str(tmp_path / 'm' / 'config.json') in err


def test_inspect_cli_every_flag_has_help():
    from timm_odevit.inspect_cli import inspect_parser
    assert not [a.dest for a in inspect_parser()._actions if not a.help]


@pytest.mark.parametrize('call,words', [
    (lambda m, x: analysis.mass_mask(torch.rand(2, 4, 4), float('nan')), 'q'),
    (lambda m, x: analysis.mass_mask(torch.rand(2, 4, 4), 1.5), 'q'),
    (lambda m, x: analysis.lyapunov_exponent(m, x, steps=0), 'steps must be an integer >= 1'),
    (lambda m, x: analysis.lipschitz_estimate(m, x, iters=0), 'power iterations'),
    (lambda m, x: analysis.lyapunov_exponent_of_field(lambda z: -z, torch.ones(1, 2, 3), t_end=1., steps=4,
                                                      transient=1.), 'transient'),
    (lambda m, x: analysis.lyapunov_exponent_of_field(lambda z: -z, torch.ones(1, 2, 3), t_end=0., steps=4), 't_end'),
])
def test_degenerate_analysis_arguments_are_refused(model, image, call, words):
    with pytest.raises(ValueError, match=words):
        call(model, image)
