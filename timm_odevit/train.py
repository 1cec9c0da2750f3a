"""``python -m timm_odevit.train`` (the README's and the configs' command): :func:`timm_odevit.cli.train.main`."""
from timm_odevit.cli.train import main

if __name__ == '__main__':
    main()
