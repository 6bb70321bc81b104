#!/usr/bin/env python3
"""A private, throw-away PostgreSQL cluster for tests: a temp dir, a free loopback port.

    python tools/pg_cluster.py start   # prints the SQLAlchemy URL, then the cluster dir
    python tools/pg_cluster.py stop DIR

Used as a library by ``tests/conftest.py`` (``PgCluster.start()`` / ``.stop()``).

initdb and postgres refuse to run as root, so when run as root the cluster's files belong to an
unprivileged system user (``postgres`` where the Debian package created it, else ``nobody``)
and the server programs run as that user (``subprocess``'s ``user=``/``group=``). Settings
favour speed over durability (``fsync=off``): the data is discarded afterwards. Authentication
is ``trust`` on 127.0.0.1 only, for the superuser ``servescope``.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

SUPERUSER = "servescope"
DATABASE = "servescope"
_STATE_FILE = "cluster.port"


class PgClusterError(RuntimeError):
    """The cluster could not be created, started or stopped; the message says why."""


def find_bin(name: str) -> str | None:
    """Path of a PostgreSQL server program (initdb, pg_ctl), or None when not installed."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    return candidates[0] if candidates else None


def available() -> bool:
    return find_bin("initdb") is not None and find_bin("pg_ctl") is not None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _run_as() -> pwd.struct_passwd | None:
    """The unprivileged user to run the server as, or None when we are not root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise PgClusterError("running as root and neither user 'postgres' nor 'nobody' exists")


@dataclass
class PgCluster:
    base: Path  # the temp dir: data/, sock/, server.log
    port: int

    @property
    def data(self) -> Path:
        return self.base / "data"

    @property
    def log(self) -> Path:
        return self.base / "server.log"

    def url(self, database: str = DATABASE) -> str:
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def libpq_url(self, database: str = DATABASE) -> str:
        """The same URL for plain psycopg / libpq (no SQLAlchemy driver suffix)."""
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    # -- lifecycle -------------------------------------------------------------------------------

    @classmethod
    def start(
        cls, base: Path | None = None, *, attempts: int = 5, timeout_s: float = 60
    ) -> PgCluster:
        """initdb a fresh cluster in ``base`` (default: a new temp dir) and start it on a free
        port; retries with another port if one was taken meanwhile."""
        initdb, pg_ctl = find_bin("initdb"), find_bin("pg_ctl")
        if initdb is None or pg_ctl is None:
            raise PgClusterError("PostgreSQL server programs (initdb, pg_ctl) are not installed")
        user = _run_as()
        # Not under pytest's tmp dirs: those are 0700 root, untraversable for the server user.
        base = Path(tempfile.mkdtemp(prefix="servescope-pg-")) if base is None else base
        base.mkdir(parents=True, exist_ok=True)
        (base / "sock").mkdir(exist_ok=True)
        if user is not None:
            for path in (base, base / "sock"):
                os.chown(path, user.pw_uid, user.pw_gid)
        cluster = cls(base=base, port=0)
        cluster._run(
            [
                initdb,
                "-D",
                str(cluster.data),
                "-U",
                SUPERUSER,
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
            timeout_s,
        )
        last_error = ""
        for _ in range(attempts):
            cluster.port = free_port()
            options = (
                f"-p {cluster.port} -c listen_addresses=127.0.0.1 "
                f"-c unix_socket_directories={base / 'sock'} -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
            )
            try:
                cluster._run(
                    [
                        pg_ctl,
                        "-D",
                        str(cluster.data),
                        "-l",
                        str(cluster.log),
                        "-o",
                        options,
                        "-w",
                        "-t",
                        str(int(timeout_s)),
                        "start",
                    ],
                    timeout_s + 10,
                )
            except PgClusterError as exc:
                last_error = f"{exc}\n{cluster.log_tail()}"
                continue
            (base / _STATE_FILE).write_text(str(cluster.port))
            cluster._createdb(DATABASE, timeout_s)
            return cluster
        cluster.remove()
        raise PgClusterError(f"PostgreSQL did not start after {attempts} attempts: {last_error}")

    @classmethod
    def attach(cls, base: Path) -> PgCluster:
        """The cluster that ``start`` left in ``base`` (for the ``stop`` command)."""
        return cls(base=base, port=int((base / _STATE_FILE).read_text()))

    def stop(self, timeout_s: float = 60) -> None:
        """Stop the server (fast shutdown) and delete the temp dir."""
        pg_ctl = find_bin("pg_ctl")
        try:
            if pg_ctl is not None and (self.data / "postmaster.pid").exists():
                self._run(
                    [
                        pg_ctl,
                        "-D",
                        str(self.data),
                        "-m",
                        "fast",
                        "-w",
                        "-t",
                        str(int(timeout_s)),
                        "stop",
                    ],
                    timeout_s + 10,
                )
        finally:
            self.remove()

    def remove(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    # -- databases -------------------------------------------------------------------------------

    def create_database(self, name: str) -> str:
        """CREATE DATABASE ``name``; returns its SQLAlchemy URL."""
        self._createdb(name, 60)
        return self.url(name)

    def _createdb(self, name: str, timeout_s: float) -> None:
        create_database(self.libpq_url("postgres"), name, timeout_s)

    # -- helpers ---------------------------------------------------------------------------------

    def _run(self, argv: list[str], timeout_s: float) -> None:
        user = _run_as()
        kwargs: dict[str, object] = {}
        if user is not None:
            kwargs = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
        env = dict(os.environ, LC_ALL="C", LANG="C")
        if user is not None:
            env["HOME"] = str(self.base)
        try:
            proc = subprocess.run(  # type: ignore[call-overload]
                argv,
                cwd=self.base,
                env=env,
                stdin=subprocess.DEVNULL,
                # pg_ctl's server inherits our stdout: a pipe would stay open for its lifetime.
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                timeout=timeout_s,
                check=False,
                **kwargs,
            )
        except subprocess.TimeoutExpired as exc:
            raise PgClusterError(f"{Path(argv[0]).name} timed out after {timeout_s:.0f} s") from exc
        if proc.returncode != 0:
            raise PgClusterError(
                f"{Path(argv[0]).name} exited {proc.returncode}: {proc.stderr.strip()}"
            )


def create_database(libpq_admin_url: str, name: str, timeout_s: float = 60) -> None:
    """CREATE DATABASE through psycopg (imported lazily: the CLI works without it for start)."""
    if not name.replace("_", "").isalnum():
        raise PgClusterError(f"invalid database name {name!r}: letters, digits and _ only")
    import psycopg

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with psycopg.connect(libpq_admin_url, autocommit=True, connect_timeout=5) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')  # name validated above
            return
        except psycopg.errors.DuplicateDatabase:
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)  # poll: the server may still be finishing its start-up


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A private, throw-away PostgreSQL cluster.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    start = sub.add_parser("start", help="start; print the URL, then the cluster dir")
    start.add_argument("--dir", type=Path, help="cluster dir (default: a new temp dir)")
    stop = sub.add_parser("stop", help="stop the cluster in DIR and delete DIR")
    stop.add_argument("dir", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.cmd == "start":
            cluster = PgCluster.start(args.dir)
            print(cluster.url())
            print(cluster.base)
        else:
            PgCluster.attach(args.dir).stop()
    except PgClusterError as exc:
        print(f"pg_cluster: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
