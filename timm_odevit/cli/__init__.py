"""The command-line entry points that run timm's own scripts with this package's models and tasks."""
