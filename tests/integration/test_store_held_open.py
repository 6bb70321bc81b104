"""``Store.held_open``: a DuckDB file kept open for one piece of work — each ``connect()`` inside
is still its own transaction; other processes get the file back when the block ends."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from errors import StoreError
from store.lifecycle import open_store

#: Another process opening the file: exit 0 when it could, 3 when the file was locked.
_OTHER = """
import sys, duckdb
try:
    duckdb.connect(sys.argv[1]).close()
except duckdb.IOException:
    sys.exit(3)
"""


def _other_process_opens(path: Path) -> bool:
    done = subprocess.run([sys.executable, "-c", _OTHER, str(path)], timeout=60)
    assert done.returncode in (0, 3)
    return done.returncode == 0


def test_the_file_is_held_for_the_block_and_let_go_after(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    store = open_store(f"duckdb:///{path}", lock_timeout_s=0.2)
    try:
        assert _other_process_opens(path)  # between reads nobody holds it
        with store.held_open():
            assert store.read_df("SELECT 1 AS one")["one"].tolist() == [1]
            assert not _other_process_opens(path)
        assert _other_process_opens(path)
    finally:
        store.dispose()


def test_each_connect_inside_is_its_own_transaction(tmp_path: Path) -> None:
    store = open_store(f"duckdb:///{tmp_path / 's.duckdb'}")
    try:
        with store.held_open():
            with store.connect() as conn:
                conn.execute(sa.text("CREATE TABLE t (x INTEGER)"))
                conn.execute(sa.text("INSERT INTO t VALUES (1)"))
            with pytest.raises(StoreError), store.connect() as conn:
                conn.execute(sa.text("INSERT INTO nope VALUES (1)"))  # fails and rolls back alone
            assert store.read_df("SELECT x FROM t")["x"].tolist() == [1]  # still readable
        assert store.read_df("SELECT x FROM t")["x"].tolist() == [1]  # and it was committed
    finally:
        store.dispose()


def test_a_no_op_for_an_in_memory_store() -> None:
    from store.lifecycle import memory_store

    store = memory_store()
    with store.held_open() as same:
        assert same is store
        assert store.read_df("SELECT 2 AS two")["two"].tolist() == [2]
