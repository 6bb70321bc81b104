"""The ``servescope`` commands: each module registers its parser and runs it (``cli.py``
composes them).

- ``bench``, ``imports``, ``export``, ``watch``, ``sim``: measure, import, export, collect live,
  serve the reference engine;
- ``demo``: fill the store with simulated engines' runs, then open the dashboard;
- ``db``: store maintenance (info, runs, migrate, ingest-spool, prepare);
- ``prepare``: what the pages show first of a run, computed right after it is stored;
- ``ui``: the dashboard (Streamlit) in the foreground, with the stop signals forwarded to it.
"""

from __future__ import annotations

from pathlib import Path

#: The repository root: where a child ``python -m cli`` runs and ``ui/entry`` lives.
PROJECT_ROOT = Path(__file__).resolve().parents[2]
