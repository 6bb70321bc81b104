"""Every setting is documented (like datasette's test_docs.py), and reading them is injectable."""

from __future__ import annotations

from pathlib import Path

import settings

DOCS = Path(__file__).resolve().parents[2] / "docs" / "settings.md"


def test_every_setting_is_documented_with_its_default() -> None:
    text = DOCS.read_text(encoding="utf-8")
    for setting in settings.SETTINGS:
        assert f"`{setting.name}`" in text, f"{setting.name} is not in docs/settings.md"
        if setting.default:
            assert f"`{setting.default}`" in text, f"default of {setting.name} not documented"


def test_values_come_from_the_injected_environment() -> None:
    env = {"SERVESCOPE_DB": "postgresql+psycopg://u@h/db", "SERVESCOPE_LOCK_TIMEOUT_S": "2.5"}
    assert settings.db_url(env) == "postgresql+psycopg://u@h/db"
    assert settings.lock_timeout_s(env) == 2.5
    assert settings.db_url({}) == settings.DEFAULT_DB_URL
    assert settings.db_url({"SERVESCOPE_DB": ""}) == settings.DEFAULT_DB_URL
    assert not settings.sql_trace({})
    assert settings.sql_trace({"SERVESCOPE_SQL_TRACE": "1"})
