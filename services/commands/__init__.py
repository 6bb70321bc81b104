"""The ``servescope`` commands: each module registers its parser and runs it (``cli.py``
composes them)."""
