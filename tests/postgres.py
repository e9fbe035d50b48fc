"""A throwaway PostgreSQL cluster for the tests, and an isolated place in it per test.

One cluster per pytest process (each xdist worker has its own): started on first use, in a
private temporary directory, listening on a Unix socket there only (no TCP port, so clusters of
parallel test processes never meet), with ``fsync`` off (a test database need not survive a power
loss). It is stopped (``pg_ctl stop -m immediate``) and its directory removed when the process
exits — or, should the process be killed, by a small watcher process that waits for it to end.
The server refuses to run as root: when the tests run as root, ``initdb`` and ``pg_ctl``
run as the ``postgres`` user (``runuser``), which owns the directory.

Each test gets a schema of its own (``t_<random>``), dropped after it: tests share the cluster
but never see each other's tables. No test is skipped when PostgreSQL is missing: the first one
that needs it fails with a message saying how to install it.

* :func:`postgres_url` — the cluster's URL (starting it if needed);
* :func:`postgres_database` — ``async with`` an open :class:`PostgresDatabase` on a fresh schema;
* :func:`fresh_schema` / :func:`drop_schema` — a schema name no other test uses, and its removal;
* the fixtures :func:`postgres_schema` (a fresh schema's ``(url, schema)``, dropped after the
  test) and :func:`postgres_db` (an open database on a fresh schema).
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, suppress
from typing import Any, Final

import attrs
import psycopg
import pytest
from psycopg import sql

from capabilities.storage._postgres import PostgresDatabase, open_postgres

__all__ = [
    "drop_schema",
    "fresh_schema",
    "postgres_database",
    "postgres_db",
    "postgres_schema",
    "postgres_url",
]

#: The unprivileged user the server runs as when the tests run as root.
_SERVER_USER: Final = "postgres"

_MISSING: Final = (
    "PostgreSQL's server programs (initdb, pg_ctl) were not found: the PostgreSQL tests need "
    "them. `make sysdeps` installs them (the Debian `postgresql` package), or install it with "
    "`apt-get install postgresql`."
)


def _bindir() -> str:
    """The directory of ``initdb`` and ``pg_ctl``: ``pg_config --bindir``, else the newest
    ``/usr/lib/postgresql/*/bin``."""
    candidates: list[str] = []
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        try:
            found = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True, timeout=30
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            found = ""
        if found:
            candidates.append(found)

    def version(path: str) -> tuple[int, ...]:
        name = os.path.basename(os.path.dirname(path))
        return tuple(int(part) for part in name.split(".") if part.isdigit())

    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True)
    for directory in candidates:
        if all(os.access(os.path.join(directory, p), os.X_OK) for p in ("initdb", "pg_ctl")):
            return directory
    pytest.fail(_MISSING, pytrace=False)


@attrs.define
class _Cluster:
    """A running cluster: its directory (the socket is there) and how to run its programs."""

    directory: str
    bindir: str
    as_user: list[str]

    @property
    def data(self) -> str:
        return os.path.join(self.directory, "data")

    @property
    def url(self) -> str:
        return f"postgresql://postgres@/postgres?host={self.directory}"

    def run(self, program: str, *args: str) -> None:
        command = [*self.as_user, os.path.join(self.bindir, program), *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            log = os.path.join(self.directory, "server.log")
            tail = ""
            if os.path.exists(log):
                with open(log, encoding="utf-8", errors="replace") as handle:
                    tail = handle.read()[-2000:]
            raise RuntimeError(
                f"{program} failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}\n{tail}"
            )

    def start(self) -> None:
        self.run(
            "initdb",
            "-D",
            self.data,
            "--auth=trust",
            "-U",
            "postgres",
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C",
        )
        options = (
            f"-k {self.directory} -c listen_addresses='' -c fsync=off "
            "-c max_connections=200 -c shared_buffers=32MB -c synchronous_commit=off"
        )
        log = os.path.join(self.directory, "server.log")
        self.run("pg_ctl", "-w", "-t", "60", "-D", self.data, "-l", log, "-o", options, "start")

    def stop(self) -> None:
        with suppress(OSError, RuntimeError, subprocess.SubprocessError):
            self.run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.directory, ignore_errors=True)


_lock = threading.Lock()
_cluster: _Cluster | None = None


def _start() -> _Cluster:
    bindir = _bindir()
    directory = tempfile.mkdtemp(prefix="effectagent-pg-")
    as_user: list[str] = []
    if os.geteuid() == 0:  # the server refuses to run as root
        runuser = shutil.which("runuser")
        if runuser is None:
            pytest.fail("the tests run as root and `runuser` is missing: it runs PostgreSQL")
        user = pwd.getpwnam(_SERVER_USER)
        os.chown(directory, user.pw_uid, user.pw_gid)
        as_user = [runuser, "-u", _SERVER_USER, "--"]
    cluster = _Cluster(directory, bindir, as_user)
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    atexit.register(cluster.stop)
    _watch(cluster)
    return cluster


#: Run beside the tests: waits for the test process to end (a pidfd), however it ends, then
#: stops its cluster and removes its directory — a killed test run leaves no server behind.
_WATCHER: Final = """
import os, select, shutil, subprocess, sys
parent, directory, *stop = sys.argv[1:]
try:
    select.select([os.pidfd_open(int(parent))], [], [])
except ProcessLookupError:
    pass  # it has ended already
except (AttributeError, OSError):
    sys.exit(0)  # cannot watch: the test process stops its cluster itself
if os.path.isdir(directory):
    subprocess.run(stop, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
    shutil.rmtree(directory, ignore_errors=True)
"""


#: Starts the watcher and leaves at once: the watcher, orphaned, is not a child of the test
#: process (tests that check their process left no descendant behind must not see it).
_LAUNCHER: Final = """
import subprocess, sys
subprocess.Popen(
    sys.argv[1:],
    stdin=subprocess.DEVNULL,
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
    start_new_session=True,  # not killed with the test run's process group
)
"""


def _watch(cluster: _Cluster) -> None:
    stop = [*cluster.as_user, os.path.join(cluster.bindir, "pg_ctl")]
    stop += ["-D", cluster.data, "-m", "immediate", "-w", "stop"]
    watcher = [sys.executable, "-c", _WATCHER, str(os.getpid()), cluster.directory, *stop]
    subprocess.run([sys.executable, "-c", _LAUNCHER, *watcher], check=True, timeout=60)


def postgres_url() -> str:
    """The URL of this process's test cluster (``postgresql://postgres@/postgres?host=…``),
    starting it on first use."""
    global _cluster
    with _lock:
        if _cluster is None:
            _cluster = _start()
        return _cluster.url


def fresh_schema() -> str:
    """A schema name no other test uses (``t_<random>``); nothing is created."""
    return f"t_{secrets.token_hex(6)}"


def drop_schema(schema: str) -> None:
    """Drop ``schema`` and everything in it (nothing when it is missing)."""
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@asynccontextmanager
async def postgres_database(**options: Any) -> AsyncIterator[PostgresDatabase]:
    """An open :class:`PostgresDatabase` on a fresh schema of the test cluster (``options`` go
    to :func:`open_postgres`), closed and its schema dropped after the block."""
    schema = options.pop("schema", None) or fresh_schema()
    try:
        async with open_postgres(postgres_url(), schema=schema, **options) as database:
            yield database
    finally:
        drop_schema(schema)


@pytest.fixture
def postgres_schema() -> Iterator[tuple[str, str]]:
    """``(url, schema)``: the test cluster and a fresh schema name, dropped after the test."""
    url, schema = postgres_url(), fresh_schema()
    try:
        yield url, schema
    finally:
        drop_schema(schema)


@pytest.fixture
async def postgres_db() -> AsyncIterator[PostgresDatabase]:
    """An open :class:`PostgresDatabase` on a fresh schema, closed and dropped after the test."""
    async with postgres_database() as database:
        yield database
