"""Release tooling of this repository (not installed): run from the repository root as ``python -m tools.<name>``."""
