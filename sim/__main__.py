"""``python -m sim [flags]``: the same as ``servescope sim [flags]``."""

from __future__ import annotations

import sys

from errors import ServeScopeError
from sim.command import main

if __name__ == "__main__":
    try:
        sys.exit(main())
    except ServeScopeError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
