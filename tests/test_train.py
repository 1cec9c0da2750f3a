"""The train.py entry point: locating timm's script, configs, and end-to-end runs of the REAL
train.py (found at $TIMM_TRAIN_PY, in the cache, or in ../shared/timm beside the checkout)."""
import argparse
import glob
import io
import itertools
import json
import os
import pathlib
import random
import shutil
import subprocess
import sys

import pytest
import timm
import torch
import yaml

from timm_odevit.cli import scripts
from timm_odevit.cli import train as cli
from timm_odevit.cli.scripts import locate_script

ROOT = pathlib.Path(__file__).resolve().parents[1]
CIFAR = ROOT.parent / 'shared' / 'data' / 'cifar10'


def _real_train_py():
    try:
        return locate_script('train.py', download=False)
    except FileNotFoundError:
        return None


TRAIN_PY = _real_train_py()  # $TIMM_TRAIN_PY, the cache, or ../shared/timm beside the checkout


def test_explicit_path_that_does_not_exist(tmp_path):
    with pytest.raises(FileNotFoundError, match='not found'):
        locate_script('train.py', str(tmp_path / 'train.py'))


def test_no_train_py_gives_instructions(tmp_path, monkeypatch):
    monkeypatch.delenv('TIMM_TRAIN_PY', raising=False)
    monkeypatch.setenv('TIMM_ODEVIT_CACHE', str(tmp_path))
    monkeypatch.setattr(scripts, 'SHARED_SCRIPTS_DIR', tmp_path / 'no_shared')
    with pytest.raises(FileNotFoundError, match=r'--timm-train PATH.*git clone --branch v'):
        locate_script('train.py', download=False)


def test_cached_script_is_found(tmp_path, monkeypatch):
    monkeypatch.delenv('TIMM_TRAIN_PY', raising=False)
    monkeypatch.setenv('TIMM_ODEVIT_CACHE', str(tmp_path))
    cached = tmp_path / f'timm-{timm.__version__}' / 'validate.py'
    cached.parent.mkdir(parents=True)
    cached.write_text('# stub')
    assert locate_script('validate.py', download=False) == cached


def test_shared_copy_beside_the_checkout_is_found(tmp_path, monkeypatch):
    monkeypatch.delenv('TIMM_TRAIN_PY', raising=False)
    monkeypatch.setenv('TIMM_ODEVIT_CACHE', str(tmp_path / 'empty_cache'))
    shared = tmp_path / 'shared' / 'timm'
    shared.mkdir(parents=True)
    for script in ('train.py', 'validate.py'):
        (shared / script).write_text('# stub')
    monkeypatch.setattr(scripts, 'SHARED_SCRIPTS_DIR', shared)
    assert locate_script('train.py', download=False) == shared / 'train.py'
    assert locate_script('validate.py', download=False) == shared / 'validate.py'
    cached = tmp_path / 'empty_cache' / f'timm-{timm.__version__}' / 'train.py'  # the cache comes first
    cached.parent.mkdir(parents=True)
    cached.write_text('# stub')
    assert locate_script('train.py', download=False) == cached


def test_downloaded_script_lands_whole_or_not_at_all(tmp_path, monkeypatch):
    """A download cut off while it is written leaves no script in the cache (the next call would run a part)."""
    monkeypatch.delenv('TIMM_TRAIN_PY', raising=False)
    monkeypatch.setenv('TIMM_ODEVIT_CACHE', str(tmp_path))
    monkeypatch.setattr(scripts, 'SHARED_SCRIPTS_DIR', tmp_path / 'no_shared')
    monkeypatch.setattr(scripts.urllib.request, 'urlopen', lambda url, timeout: io.BytesIO(b'print(1)\n'))

    def killed(*args):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(os, 'replace', killed)
        with pytest.raises(KeyboardInterrupt):
            locate_script('validate.py')
    assert [p for p in tmp_path.rglob('*') if p.is_file()] == []
    assert locate_script('validate.py').read_bytes() == b'print(1)\n'


def test_capped_auto_augment_runs_with_the_installed_pillow():
    """bench/recipe_study.py's capped RandAugment builds timm's transform and never asks Pillow for 0 bits (DeiT's
    uncapped ``rand-m9-mstd0.5-inc1`` reaches magnitude 10, which its inc1 posterize maps to 0 bits: Pillow 13 raises
    mid-epoch)."""
    from PIL import Image
    from timm.data.auto_augment import rand_augment_transform
    img = Image.new('RGB', (8, 8), (120, 60, 30))
    transform = rand_augment_transform('rand-m9-mstd0.5-inc1-mmax9', {'translate_const': 3, 'img_mean': (124, 116, 104)})
    random.seed(0)
    for _ in range(3000):
        transform(img)


@pytest.mark.parametrize('path', sorted(glob.glob(str(ROOT / 'train_configs' / '*.yaml'))), ids=os.path.basename)
def test_train_configs_name_a_claim_and_build(path):
    text = pathlib.Path(path).read_text()
    header = list(itertools.takewhile(lambda line: line.startswith('#'), text.splitlines()))
    # the claim, the data, the cost, the command: the history is in the release folder or docs/recipes.md
    assert header[0].startswith('# Claim:') and any(line.startswith('# Cost') for line in header)
    assert len(header) <= 5 and max(map(len, header)) <= 120
    cfg = yaml.safe_load(text)
    with torch.device('meta'):
        model = timm.create_model(cfg['model'], num_classes=cfg.get('num_classes'), **(cfg.get('model_kwargs') or {}))
    assert model.num_classes == cfg['num_classes']


def test_plug_and_play_configs_share_one_recipe():
    """The plug & play study's shell and free configs differ in the model only (bench/plug_and_play.py)."""
    shell, free = (yaml.safe_load((ROOT / 'train_configs' / f'plug_and_play{name}_cifar10.yaml').read_text())
                   for name in ('', '_free'))
    model_keys = ('model', 'pretrained', 'model_kwargs')
    assert shell['model'] == 'vit_odeified' and free['model'] == 'odevit_tiny_cifar'
    assert {k: v for k, v in shell.items() if k not in model_keys} == {k: v for k, v in free.items() if k not in model_keys}


# ---- end-to-end with timm's real train.py ---------------------------------------------------------
needs_train_py = pytest.mark.skipif(
    not TRAIN_PY, reason="timm's train.py not found (../shared/timm beside the checkout, or set TIMM_TRAIN_PY)")


@pytest.fixture(scope='module')
def small_imagefolder(tmp_path_factory):
    if not CIFAR.is_dir():
        pytest.skip(f'CIFAR-10 ImageFolder not found at {CIFAR}')
    root = tmp_path_factory.mktemp('cifar_small')
    for split, n in (('train', 12), ('test', 4)):
        for c in sorted(os.listdir(CIFAR / split)):
            (root / split / c).mkdir(parents=True)
            for f in sorted(os.listdir(CIFAR / split / c))[:n]:
                shutil.copy(CIFAR / split / c / f, root / split / c / f)
    return root


def _train(args, out):
    cmd = [sys.executable, '-m', 'timm_odevit.train', *args, '--epochs', '1', '-b', '24', '--workers', '0',
           '--output', str(out), '--experiment', 'e2e', '--log-interval', '1']
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = (out / 'e2e' / 'summary.csv').read_text().splitlines()
    assert len(summary) == 2 and 'eval_top1' in summary[0]
    assert (out / 'e2e' / 'last.pth.tar').exists()
    return result.stdout + result.stderr


@needs_train_py
@pytest.mark.parametrize('model_kwargs', [['steps=2'], ['steps=2', 'train_depth=(1,3)']], ids=['fixed', 'anytime'])
def test_e2e_odevit(small_imagefolder, tmp_path, model_kwargs):
    _train(['--model', 'odevit_tiny_cifar', '--model-kwargs', *model_kwargs, '--data-dir', str(small_imagefolder),
            '--train-split', 'train', '--val-split', 'test'], tmp_path)


@needs_train_py
def test_e2e_bvit_deep_supervision(small_imagefolder, tmp_path):
    log = _train(['--model', 'bvit_tiny_cifar', '--model-kwargs', 'stages=(2,4)', 'iterations=4',
                  '--data-dir', str(small_imagefolder), '--train-split', 'train', '--val-split', 'test'], tmp_path)
    assert 'DeepSupervisionTask' in log


@needs_train_py
def test_e2e_trajectory_distillation(small_imagefolder, tmp_path):
    teacher = timm.create_model('vit_tiny_patch16_224', num_classes=10)  # a "fine-tuned" teacher saved locally
    ckpt = tmp_path / 'teacher.pth'
    torch.save(teacher.state_dict(), ckpt)
    # the release's anytime student (6 steps, 3-9 drawn per update) under a 12-block teacher: deeper than every grid
    log = _train(['--model', 'odevit_tiny_cifar', '--model-kwargs', 'steps=6', 'train_depth=(3,9)',
                  '--data-dir', str(small_imagefolder), '--train-split', 'train', '--val-split', 'test',
                  '--kd-model-name', 'vit_tiny_patch16_224', '--kd-teacher-checkpoint', str(ckpt),
                  '--kd-distill-type', 'trajectory', '--kd-mapping', 'arclength'], tmp_path)
    assert 'TrajectoryDistillationTask' in log and 'calibrated arclength mapping' in log
    assert 'teacher blocks' in log and 'at student time points [0, 1, 2, 3, 4, 5]' in log
    state = torch.load(tmp_path / 'e2e' / 'last.pth.tar', map_location='cpu', weights_only=False)
    assert state['args'].kd_distill_type == 'trajectory'  # the recorded args say what ran


@needs_train_py
def test_e2e_vit_odeified(small_imagefolder, tmp_path):
    """Plug & play from train.py: a timm ViT odeified by model kwargs, trained, checkpointed."""
    _train(['--model', 'vit_odeified', '--model-kwargs', 'base=vit_tiny_patch16_224', 'depth=3', 'img_size=32',
            'patch_size=4', 'field=odevit', '--data-dir', str(small_imagefolder), '--train-split', 'train',
            '--val-split', 'test', '--num-classes', '10'], tmp_path)
    state = torch.load(tmp_path / 'e2e' / 'last.pth.tar', map_location='cpu', weights_only=False)
    assert any(k.startswith('blocks.0.field.') for k in state['state_dict'])
    assert state['args'].model_kwargs['base'] == 'vit_tiny_patch16_224'


@needs_train_py
def test_e2e_plug_and_play_config_from_the_released_teacher(small_imagefolder, tmp_path):
    """The guide's plug & play command: the shell config, the released teacher, the paper's loss; the shell
    stays the teacher's (frozen), the field learns."""
    teacher = 'release/teacher_convstem_cifar10_cycle6'
    log = _train(['--config', str(ROOT / 'train_configs' / 'plug_and_play_cifar10.yaml'),
                  '--model-kwargs', f'base=local-dir:{ROOT / teacher}', 'field=odevit', 'init=random', 'steps=6',
                  "freeze=['patch_embed','cls_token','pos_embed','norm','head']", '--data-dir', str(small_imagefolder),
                  '--train-split', 'train', '--val-split', 'test', '--kd-model-name', f'local-dir:{ROOT / teacher}',
                  '--kd-distill-type', 'trajectory', '--kd-attn-mass-weight', '0.25', '--kd-jasmin-weight', '1.0'],
                 tmp_path)
    assert '6 teacher blocks -> 6 student time points (uniform), tokens=cls, projection=False' in log
    state = torch.load(tmp_path / 'e2e' / 'last.pth.tar', map_location='cpu', weights_only=False)['state_dict']
    shell = timm.create_model(f'local-dir:{ROOT / teacher}', pretrained=True).state_dict()
    for key in ('head.weight', 'pos_embed', 'cls_token', 'norm.weight', 'patch_embed.proj.weight'):
        assert torch.equal(state[key], shell[key]), key


# ---- --config keys -----------------------------------------------------------------------------
@pytest.fixture(scope='module')
def train_parser():
    if not TRAIN_PY:
        pytest.skip("timm's train.py not found")
    module = scripts.load_script(TRAIN_PY)
    cli._add_arguments(module.parser)
    return module.parser


@pytest.mark.parametrize('path', sorted(glob.glob(str(ROOT / 'train_configs' / '*.yaml'))), ids=os.path.basename)
def test_train_configs_have_only_known_keys(train_parser, path):
    cli.check_config_keys(train_parser, path)



@needs_train_py
def test_e2e_export_then_validate_py_gives_the_exported_accuracy(small_imagefolder, tmp_path):
    _train(['--model', 'odevit_tiny_cifar', '--model-kwargs', 'steps=2', '--data-dir', str(small_imagefolder),
            '--train-split', 'train', '--val-split', 'test'], tmp_path)
    folder = tmp_path / 'export'
    export = subprocess.run([sys.executable, '-m', 'timm_odevit.hub', str(tmp_path / 'e2e' / 'last.pth.tar'),
                             str(folder), '--eval-dir', str(small_imagefolder), '--eval-split', 'test'],
                            capture_output=True, text=True, timeout=600)
    assert export.returncode == 0, export.stderr[-3000:]
    exported = json.loads(export.stdout.strip().splitlines()[-1])
    results = tmp_path / 'validate.json'
    val = subprocess.run([sys.executable, '-m', 'timm_odevit.train', '--validate', '--model', f'local-dir:{folder}',
                          '--pretrained', '--data-dir', str(small_imagefolder), '--split', 'test', '-b', '20',
                          '--workers', '0', '--results-file', str(results), '--results-format', 'json'],
                         capture_output=True, text=True, timeout=600)
    assert val.returncode == 0, val.stdout[-3000:] + val.stderr[-3000:]
    measured = json.loads(results.read_text())
    measured = measured[0] if isinstance(measured, list) else measured
    assert measured['top1'] == pytest.approx(exported['top1'], abs=1e-3)
    assert measured['top5'] == pytest.approx(exported['top5'], abs=1e-3)


@pytest.mark.parametrize('typo, hint', [('model-kwargs', 'model_kwargs'), ('model_kwargz', 'model_kwargs'),
                                        ('kd_maping', 'kd_mapping'), ('lr_sched', None)])
def test_typo_in_config_is_refused(train_parser, tmp_path, typo, hint):
    cfg = yaml.safe_load((ROOT / 'train_configs' / 'odevit_tiny_cifar10_quick.yaml').read_text())
    cfg['kd_mapping'] = 'arclength'  # a key added by the wrapper is known
    cfg[typo] = cfg.pop('model_kwargs') if typo.startswith('model') else 1
    bad = tmp_path / 'typo.yaml'
    bad.write_text(yaml.safe_dump(cfg))
    words = f"unknown key\\(s\\) in --config {bad}: '{typo}'" + (f" \\(did you mean '{hint}'\\?\\)" if hint else '')
    with pytest.raises(SystemExit, match=words):
        cli.check_config_keys(train_parser, bad)


def test_config_that_is_not_a_mapping(train_parser, tmp_path):
    for text in ('', '- model\n- lr\n'):
        (tmp_path / 'cfg.yaml').write_text(text)
        with pytest.raises(SystemExit, match='must be a YAML mapping'):
            cli.check_config_keys(train_parser, tmp_path / 'cfg.yaml')
    with pytest.raises(SystemExit, match='cannot read --config'):
        cli.check_config_keys(train_parser, tmp_path / 'missing.yaml')


def test_a_config_that_is_not_valid_yaml_is_named_with_its_line(train_parser, tmp_path):
    """Malformed YAML gave train.py's bare 'SystemExit: ^'."""
    (tmp_path / 'c.yaml').write_text('model: odevit_tiny_cifar\nepochs: 1\n  bad: [\n')
    with pytest.raises(SystemExit, match=r'--config \S+c.yaml, line 3, column 6: not valid YAML \('):
        cli.check_config_keys(train_parser, tmp_path / 'c.yaml')


@pytest.mark.parametrize('config, words', [
    ('{"num_classes": 10}', r'"architecture" must be a JSON str'),
    ('[{"architecture": "odevit_tiny_cifar"}]', r'holds a JSON list, not a dict'),
    ('{"architecture": "odevit_tiny_cifar", "model_args": [1]}', r'"model_args" must be a JSON dict'),
    ('{"architecture": "odevit_tiny_cifar", "num_classes": "10"}', r'"num_classes" must be a JSON int'),
])
@pytest.mark.parametrize('key', ['model', 'kd_model_name'])
def test_a_local_dir_model_whose_config_json_builds_nothing_is_named(tmp_path, config, words, key):
    (tmp_path / 'config.json').write_text(config)
    args = argparse.Namespace(model='odevit_tiny_cifar', kd_model_name=None)
    cli.check_model_sources(args)
    setattr(args, key, f'local-dir:{tmp_path}')
    flag = '--' + key.replace('_', '-')
    with pytest.raises(SystemExit, match=rf'error: {flag}: .*{tmp_path / "config.json"}.*{words}'):
        cli.check_model_sources(args)


@needs_train_py
def test_main_checks_the_model_source_a_config_names(tmp_path, monkeypatch):
    """The check runs on the arguments train.py parsed: the command line's, else the --config YAML's."""
    monkeypatch.setattr(sys, 'argv', list(sys.argv))  # main() sets it for train.py
    (tmp_path / 'config.json').write_text('{"num_classes": 10}')
    (tmp_path / 'c.yaml').write_text(f'kd_model_name: local-dir:{tmp_path}\n')
    with pytest.raises(SystemExit, match=r'error: --kd-model-name: .*"architecture" must be a JSON str'):
        cli.main(['-c', str(tmp_path / 'c.yaml')])


@needs_train_py
def test_main_checks_config_before_training(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, 'argv', list(sys.argv))  # main() sets it for train.py
    bad = tmp_path / 'typo.yaml'
    bad.write_text('model: odevit_tiny_cifar\nmodel_kwargz:\n  steps: 2\n')
    with pytest.raises(SystemExit, match="'model_kwargz' \\(did you mean 'model_kwargs'\\?\\)"):
        cli.main(['-c', str(bad), '--epochs', '1'])


# ---- the wrapper runs other timm models as timm's train.py does ----------------------------------------
def test_deep_supervision_only_for_this_packages_staged_models():
    assert cli.uses_deep_supervision(timm.create_model('bvit_tiny_cifar', stages=(2, 4), iterations=4))
    assert not cli.uses_deep_supervision(timm.create_model('bvit_tiny_cifar'))
    for name in ('convnext_atto', 'maxvit_pico_rw_256'):  # timm models with a `stages` attribute
        model = timm.create_model(name, num_classes=10)
        assert len(model.stages) > 1 and not cli.uses_deep_supervision(model)


@needs_train_py
def test_help_shows_the_wrappers_own_flags():
    result = subprocess.run([sys.executable, '-m', 'timm_odevit.train', '--help'], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    for flag in ('--timm-train PATH', '--validate', '--kd-teacher-checkpoint', '--kd-model-kwargs', '--kd-mapping'):
        assert flag in result.stdout, flag


@pytest.fixture(scope='module')
def tiny_imagefolder(tmp_path_factory):
    """4 classes x 6 train / 2 val random 32 px images: no dataset needed."""
    import numpy as np
    from PIL import Image
    root = tmp_path_factory.mktemp('tiny')
    rng = np.random.default_rng(0)
    for split, n in (('train', 6), ('val', 2)):
        for c in ('a', 'b', 'c', 'd'):
            (root / split / c).mkdir(parents=True)
            for i in range(n):
                Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(root / split / c / f'{i}.png')
    return root


@needs_train_py
def test_e2e_a_non_ode_timm_model_trains_as_timm_trains_it(tiny_imagefolder, tmp_path):
    cmd = [sys.executable, '-m', 'timm_odevit.train', '--model', 'convnext_atto', '--num-classes', '4',
           '--input-size', '3', '32', '32', '--data-dir', str(tiny_imagefolder), '--train-split', 'train',
           '--val-split', 'val', '--epochs', '1', '-b', '12', '--workers', '0', '--output', str(tmp_path),
           '--experiment', 'convnext', '--log-interval', '1', '--opt', 'sgd', '--lr', '0.01']
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-3000:]
    assert 'DeepSupervisionTask' not in log
    state = torch.load(tmp_path / 'convnext' / 'last.pth.tar', map_location='cpu', weights_only=False)
    assert state['arch'] == 'convnext_atto' and state['state_dict']['head.fc.weight'].shape[0] == 4


def _script_or_skip(script):
    try:
        return locate_script(script, download=False)
    except FileNotFoundError:
        pytest.skip(f"timm's {script} not found (../shared/timm beside the checkout, or the cache)")


def test_benchmark_py_runs_our_models(tmp_path):
    """timm's benchmark.py has no plugin hook: ``--script benchmark.py`` (odevit-benchmark) registers our models
    first, and runs on the CPU when there is no GPU."""
    _script_or_skip('benchmark.py')
    results = tmp_path / 'bench.json'
    run = subprocess.run([sys.executable, '-m', 'timm_odevit.train', '--script', 'benchmark.py', '--model',
                          'odevit_tiny_cifar', '--model-kwargs', 'steps=2', '--bench', 'inference', '--num-warm-iter',
                          '1', '--num-bench-iter', '5', '--batch-size', '2', '--results-file', str(results)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    row = json.loads(run.stdout[run.stdout.index('{'):run.stdout.rindex('}') + 1])
    assert row['model'] == 'odevit_tiny_cifar' and row['infer_samples_per_sec'] > 0 and row['param_count'] == 0.56
    assert results.read_text().splitlines()[1].startswith('odevit_tiny_cifar,')


def test_inference_py_runs_our_release_or_names_its_missing_package(tmp_path):
    """timm's inference.py needs pandas (not a dependency of ours): with it, the release's class names come out;
    without it, Python's error names the package."""
    import importlib.util
    _script_or_skip('inference.py')
    if not CIFAR.is_dir():
        pytest.skip(f'CIFAR-10 ImageFolder not found at {CIFAR}')
    images = tmp_path / 'images'
    images.mkdir()
    for c in ('cat', 'ship'):
        shutil.copy(CIFAR / 'test' / c / sorted(os.listdir(CIFAR / 'test' / c))[0], images / f'{c}.png')
    run = subprocess.run([sys.executable, '-m', 'timm_odevit.train', '--script', 'inference.py', '--model',
                          'odevit_tiny_cifar.c10', '--pretrained', '--label-type', 'name', '--topk', '1',
                          '--results-dir', str(tmp_path / 'out'), '--workers', '0', str(images)],
                         capture_output=True, text=True, timeout=600)
    if importlib.util.find_spec('pandas') is None:
        assert run.returncode != 0 and "ModuleNotFoundError: No module named 'pandas'" in run.stderr
    else:
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        rows = (tmp_path / 'out' / 'odevit_tiny_cifar.c10-32.csv').read_text().splitlines()
        assert rows[0] == 'filename,label,prob' and {r.split(',')[1] for r in rows[1:]} <= set(
            timm.create_model('odevit_tiny_cifar.c10').pretrained_cfg['label_names'])


def test_validate_and_another_script_together_are_refused():
    with pytest.raises(SystemExit, match='give one'):
        cli.main(['--validate', '--script', 'benchmark.py', '--model', 'odevit_tiny_cifar'])


def test_plug_and_play_arms_are_train_py_commands(train_parser):
    """Each arm of bench/plug_and_play.py parses as train.py parses it, on its config, and runs the loss it names."""
    import copy
    sys.path.insert(0, str(ROOT / 'bench'))
    try:
        import plug_and_play
    finally:
        sys.path.remove(str(ROOT / 'bench'))
    args = argparse.Namespace(data_dir='data', epochs=3, out='output')
    for arm, (config, _) in plug_and_play.ARMS.items():
        command = plug_and_play.train_command(arm, 1, args)
        parser = copy.deepcopy(train_parser)
        parser.set_defaults(**yaml.safe_load((ROOT / config).read_text()))
        parsed = parser.parse_args(command[command.index('--data-dir'):])
        cli.check_distillation_args(parsed)
        assert parsed.epochs == 3 and parsed.seed == 1 and parsed.kd_ce_start_epoch == 0
        kind = {'plug_and_play': 'trajectory', 'free_traj_ce0': 'trajectory', 'shell_logit_kd': 'logit'}.get(arm)
        assert parsed.kd_distill_type == kind or (kind is None and parsed.kd_model_name is None), arm
        assert parsed.model == ('vit_odeified' if arm.startswith(('shell', 'plug')) else 'odevit_tiny_cifar'), arm
