"""The validate.py options that rebuild the model a train.py run trained, read from the run's ``args.yaml``.

    python -m tools.validate_args RUN_DIR/args.yaml     # prints: --model NAME --num-classes N [--interpolation I]
                                                        #   [--model-kwargs k=v ...]

``make train`` scores its run's last checkpoint on the test split with these options (timm's validate.py builds the
model by name and does not read the run's settings).
"""
import json
import pathlib
import sys
from typing import List

import yaml


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
    kwargs = args.get('model_kwargs') or {}
    if kwargs:  # values as timm's ParseKwargs reads them back (ast.literal_eval), one shell word each
        options += ['--model-kwargs'] + [f'{k}={json.dumps(v, separators=(",", ":"))}' for k, v in kwargs.items()]
    return options


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
