"""tools.validate_args: the validate.py options that rebuild a train.py run's model (make train's test score)."""
import ast

import pytest
import yaml

from tools.validate_args import main, validate_args


def test_the_runs_model_name_classes_interpolation_and_kwargs(tmp_path, capsys):
    args = {'model': 'odevit_tiny_cifar', 'num_classes': 10, 'interpolation': 'bicubic', 'val_split': '',
            'model_kwargs': {'steps': 6, 'train_depth': [3, 9], 'solver': 'euler'}}
    (tmp_path / 'args.yaml').write_text(yaml.safe_dump(args))
    options = validate_args(tmp_path / 'args.yaml')
    assert options[:6] == ['--model', 'odevit_tiny_cifar', '--num-classes', '10', '--interpolation', 'bicubic']
    words = options[options.index('--model-kwargs') + 1:]
    assert {w.split('=', 1)[0]: ast.literal_eval(w.split('=', 1)[1]) for w in words} == args['model_kwargs']
    assert all(' ' not in w for w in options)  # make splits the printed line into words
    main([str(tmp_path / 'args.yaml')])
    assert capsys.readouterr().out.split() == options
    (tmp_path / 'args.yaml').write_text(yaml.safe_dump({'model': 'bvit_tiny_cifar', 'interpolation': ''}))
    assert validate_args(tmp_path / 'args.yaml') == ['--model', 'bvit_tiny_cifar']


def test_kwargs_and_preprocessing_come_back_as_the_run_had_them(tmp_path):
    """Booleans and None as Python literals (JSON's false would reach the model as the string 'false'), the run's
    preprocessing options, and a value no shell word can carry refused."""
    args = {'model': 'odevit_tiny_cifar', 'mean': [0.5, 0.5, 0.5], 'std': [0.25, 0.25, 0.25], 'crop_pct': 1.0,
            'img_size': 32, 'model_kwargs': {'adjoint': False, 'solver_options': None, 'stages': (3, 6)}}
    (tmp_path / 'args.yaml').write_text(yaml.safe_dump(args))
    options = validate_args(tmp_path / 'args.yaml')
    assert options[options.index('--mean'):options.index('--mean') + 4] == ['--mean', '0.5', '0.5', '0.5']
    assert ['--img-size', '32'] == options[options.index('--img-size'):options.index('--img-size') + 2]
    assert ['--crop-pct', '1.0'] == options[options.index('--crop-pct'):options.index('--crop-pct') + 2]
    words = dict(w.split('=', 1) for w in options[options.index('--model-kwargs') + 1:])
    assert {k: ast.literal_eval(v) for k, v in words.items()} == {'adjoint': False, 'solver_options': None,
                                                                   'stages': [3, 6]}
    (tmp_path / 'args.yaml').write_text(yaml.safe_dump({'model': 'm', 'model_kwargs': {'name': 'a b'}}))
    with pytest.raises(ValueError, match="model_kwargs name='a b' cannot be passed to validate.py as one word"):
        validate_args(tmp_path / 'args.yaml')


def test_a_file_that_is_not_a_runs_args_is_refused(tmp_path):
    (tmp_path / 'args.yaml').write_text('- model\n')
    with pytest.raises(SystemExit, match='names no model'):
        main([str(tmp_path / 'args.yaml')])
    with pytest.raises(SystemExit, match='No such file'):
        main([str(tmp_path / 'missing.yaml')])


@pytest.mark.parametrize('cifar', ['', '/data/cifar10'])
def test_make_train_selects_nothing_on_the_test_images(cifar):
    """Issue 62: the quick start trains without a validation split and scores the last weights once on test."""
    import pathlib
    import shutil
    import subprocess
    if shutil.which('make') is None:
        pytest.skip('make is not installed')
    root = pathlib.Path(__file__).resolve().parents[2]
    plan = subprocess.run(['make', '-n', '-C', str(root), 'train', f'CIFAR={cifar}', 'STAMP='], check=True,
                          capture_output=True, text=True).stdout.replace('\\\n', ' ')
    train, score = [line for line in plan.splitlines() if 'timm_odevit.train' in line]
    assert "--val-split ''" in train and '--validate' not in train and 'test' not in train.replace('--val-split', '')
    assert '--validate' in score and '--split test' in score and '/last.pth.tar' in score
    assert 'the top-1 above is on the CIFAR-10 test split' in plan
