"""`servescope verify` against a real engine: llama.cpp's llama-server serving SmolLM2-135M.

Reuses the ``llama_server`` fixture of test_llamacpp.py (the binary that
``tools/build_llama_server.sh`` builds; skipped without it, failed under
SERVESCOPE_TEST_STRICT=1). Every check must pass on both APIs: a failure here is either a
llama.cpp behaviour worth reporting or a check that is wrong, never one to weaken.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_llamacpp import MODEL_ALIAS, LlamaServer, llama_server  # noqa: F401  (the fixture)

import cli
from collectors.endpoint_checks import CHECKS
from errors import ExitCode
from store.lifecycle import open_store
from store.verifications import latest_verifications, verification_checks

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow, pytest.mark.timeout(600)]


def test_llama_server_passes_every_check(
    llama_server: LlamaServer,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    db = f"duckdb:///{tmp_path / 's.duckdb'}"
    code = cli.main(["verify", "--endpoint", llama_server.url, "--timeout", "120", "--db", db])
    out = capsys.readouterr().out
    assert code == ExitCode.OK, f"{out}\n--- llama-server\n{llama_server.log_tail()}"
    expected = 2 * len(CHECKS) - 1  # multi_turn is chat-only
    assert f"{expected} passed, 0 failed" in out
    store = open_store(db)
    try:
        row = latest_verifications(store).iloc[0]
        assert row["framework"] == "llama.cpp" and row["model"] == MODEL_ALIAS
        assert row["framework_version"]  # from /props build_info
        assert (row["passed"], row["failed"]) == (expected, 0)
        checks = verification_checks(store, row["verify_id"])
        assert checks["passed"].all() and len(checks) == expected
    finally:
        store.dispose()
