"""The validate.py options that rebuild the model a train.py run trained, read from the run's ``args.yaml``.

    python -m tools.validate_args RUN_DIR/args.yaml     # prints: --model NAME --num-classes N [--interpolation I]
                                                        #   [--img-size / --input-size / --crop-pct / --mean / --std]
                                                        #   [--model-kwargs k=v ...]

``make train`` scores its run's last checkpoint on the test split with these options (timm's validate.py builds the
model by name and does not read the run's settings).
"""
import ast
import pathlib
import sys
from typing import List

import yaml


PREPROCESSING = {  # train.py's data options (args.yaml keys) and validate.py's flags for them
    'img_size': '--img-size',
    'input_size': '--input-size',
    'crop_pct': '--crop-pct',
    'mean': '--mean',
    'std': '--std',
}


def validate_args(args_yaml) -> List[str]:
    """validate.py's model options of the train.py run whose ``args.yaml`` is ``args_yaml``."""
    path = pathlib.Path(args_yaml)
    args = yaml.safe_load(path.read_text())
    if not isinstance(args, dict) or not args.get('model'):
        raise ValueError(f'{path} names no model: expected the args.yaml a train.py run writes')
    options = ['--model', args['model']]
    if args.get('num_classes') is not None:
        options += ['--num-classes', str(args['num_classes'])]
    if args.get('interpolation'):
        options += ['--interpolation', args['interpolation']]
    for key, flag in PREPROCESSING.items():  # what train.py's data config read from the run's options
        value = args.get(key)
        if value is not None:
            options += [flag] + [str(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
    kwargs = args.get('model_kwargs') or {}
    if kwargs:  # values as timm's ParseKwargs reads them back (ast.literal_eval), one shell word each
        options += ['--model-kwargs'] + [_kwarg_word(path, k, v) for k, v in kwargs.items()]
    return options


def _kwarg_word(path: pathlib.Path, key: str, value) -> str:
    """``key=value`` as one word that timm's ParseKwargs reads back as ``value`` (a Python literal: JSON's true /
    null would come back as strings); ValueError for a value no such word can carry."""
    word = repr(value).replace(', ', ',').replace(': ', ':')
    try:
        same = ' ' not in word and ast.literal_eval(word) == value
    except (ValueError, SyntaxError):
        same = False
    if not same:
        raise ValueError(f'{path}: model_kwargs {key}={value!r} cannot be passed to validate.py as one word')
    return f'{key}={word}'


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        raise SystemExit('usage: python -m tools.validate_args RUN_DIR/args.yaml')
    try:
        print(' '.join(validate_args(argv[0])))  # words without spaces: make splits them
    except (OSError, ValueError, yaml.YAMLError) as e:
        raise SystemExit(f'error: {e}') from None


if __name__ == '__main__':
    main()
