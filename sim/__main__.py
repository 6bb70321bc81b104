"""``python -m sim [flags]``: the same as ``servescope sim [flags]`` (the command lives in
``services.commands.sim``; this entry point hands its flags to the ``servescope`` parser)."""

from __future__ import annotations

import sys

import cli

if __name__ == "__main__":
    sys.exit(cli.main(["sim", *sys.argv[1:]]))
