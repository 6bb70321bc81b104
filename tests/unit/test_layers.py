"""The layering lint holds the floor plan (docs/ARCHITECTURE.md, "Import rules"): for every layer a
deliberately wrong import fails ruff's TID251 with a message that names the layer and where to go
instead, the imports the layer is meant to use pass, and the real tree has no banned import.

Each layer folder carries its own ``ruff.toml``; ruff REPLACES the root's banned-api table with a
nested one, so these probes also catch a layer file that forgot to re-list a root ban (Streamlit).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ruff.__main__ import find_ruff_bin

ROOT = Path(__file__).resolve().parents[2]
#: ruff's own binary: ``python -m ruff`` would start an interpreter (~0.15 s) per probe
RUFF = str(find_ruff_bin())

#: The plan, written independently of the ruff.toml files it checks:
#: layer → the top-level modules it must not import.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "store": ("collectors", "sim", "services", "ui", "pages", "streamlit"),
    "collectors": ("services", "ui", "pages", "streamlit"),
    "sim": ("services", "ui", "pages", "streamlit"),
    "services": ("ui", "pages", "streamlit"),
    "ui": ("collectors", "store", "sim", "sqlalchemy", "duckdb", "httpx"),
    "pages": (
        "collectors",
        "store",
        "sim",
        "sqlalchemy",
        "duckdb",
        "httpx",
        "plotly.graph_objects",
    ),
    "analysis": (
        "store",
        "collectors",
        "services",
        "sim",
        "ui",
        "pages",
        "streamlit",
        "sqlalchemy",
        "duckdb",
        "httpx",
    ),
}

#: layer → imports the layer is meant to use (none of them may be flagged).
ALLOWED: dict[str, str] = {
    "store": "import duckdb\nimport sqlalchemy\nimport analysis.buckets\nimport errors\n",
    "collectors": (
        "import httpx\nimport analysis.buckets\nimport store.db\nfrom store.db import Store\n"
    ),
    "sim": "import analysis.buckets\nimport errors\nimport settings\n",
    "services": (
        "import analysis.buckets\nimport collectors.loadgen\nimport sim\nimport store.db\n"
        "from store.db import Store\n"
    ),
    "ui": (
        "import streamlit\nimport plotly.graph_objects\nimport analysis.buckets\n"
        "import services.views\nfrom services.store_session import short_lived_store\n"
    ),
    "pages": "import streamlit\nimport ui.state\nimport services.views\nimport analysis.buckets\n",
    "analysis": "import numpy\nimport pandas\nimport errors\n",
}

#: Spellings of an import that must all be caught (``{module}`` is the banned module).
IMPORT_FORMS = ("import {module}", "import {module}.probe", "from {module}.probe import thing")


def ruff_banned_imports(source: str, filename: str) -> list[dict[str, Any]]:
    """Run ruff's TID251 (banned-api) on ``source`` as if it were the file ``filename``
    (relative to the repository root, so the layer's nested ruff.toml applies) and return its
    diagnostics."""
    completed = subprocess.run(
        [
            RUFF,
            "check",
            "--select",
            "TID251",
            "--output-format",
            "json",
            "--stdin-filename",
            filename,
            "-",
        ],
        input=source,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert completed.returncode in (0, 1), completed.stderr
    diagnostics: list[dict[str, Any]] = json.loads(completed.stdout)
    return diagnostics


def test_every_layer_folder_has_its_own_lint_file() -> None:
    for layer in FORBIDDEN:
        assert (ROOT / layer / "ruff.toml").is_file(), f"{layer}/ruff.toml is missing"


@pytest.mark.parametrize(
    ("layer", "module", "form"),
    [
        (layer, module, form)
        for layer, modules in FORBIDDEN.items()
        for module in modules
        for form in IMPORT_FORMS
    ],
)
def test_a_wrong_import_fails_the_lint(layer: str, module: str, form: str) -> None:
    source = form.format(module=module) + "\n"
    diagnostics = ruff_banned_imports(source, f"{layer}/probe.py")
    assert [d["code"] for d in diagnostics] == ["TID251"], (layer, source, diagnostics)
    message = diagnostics[0]["message"]
    assert message.startswith(f"`{module}` is banned: "), message
    # The message says which rule was broken and where the code belongs instead.
    assert f"{layer}/" in message, message
    assert "docs/ARCHITECTURE.md" in message, message


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_the_imports_a_layer_is_meant_to_use_pass(layer: str) -> None:
    assert ruff_banned_imports(ALLOWED[layer], f"{layer}/probe.py") == []


@pytest.mark.parametrize("filename", ["cli.py", "bench/probe.py", "tools/probe.py"])
def test_outside_the_ui_streamlit_stays_banned(filename: str) -> None:
    diagnostics = ruff_banned_imports("import streamlit\n", filename)
    assert [d["code"] for d in diagnostics] == ["TID251"]


def test_the_tree_has_no_banned_import() -> None:
    completed = subprocess.run(
        [
            RUFF,
            "check",
            "--select",
            "TID251",
            "--output-format",
            "concise",
            ".",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
