"""A PostgreSQL primary and a streaming standby of the tests' own, for failover.

Made from the PostgreSQL binaries already installed (initdb, pg_basebackup,
pg_ctl), as the `postgres` user when the tests run as root, on free ports, in a
temporary folder: the machine's own server is never touched. `PgPair` is a
context manager: both servers are stopped and their folder removed on exit,
also when a test fails.

    with PgPair(synchronous=True) as pair:
        url = pair.url            # postgresql://postgres@h:p1,h:p2/postgres?target_session_attrs=read-write
        pair.fall_behind(5)       # the standby receives nothing for 5 s (asynchronous)
        pair.fail_over()          # primary stopped with -m immediate, standby promoted

The standby streams from the primary through a TCP proxy (dbproxy.py): black-holing
it is an asynchronous standby's replication lag, made as long as a test needs.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import psycopg
from dbproxy import ProxyProcess

from conftest import free_ports

STANDBY_NAME = "denpyo_standby"


def postgres_bin() -> Path | None:
    """The folder of the newest installed PostgreSQL's server binaries, if any."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_basebackup"), key=_version)
    return Path(found[-1]).parent if found else None


def _version(path: str) -> int:
    return int(Path(path).parent.parent.name.split(".")[0])


class PgPair:
    """A primary and its standby. `synchronous`: the primary waits for the standby's
    flush at each commit (`synchronous_standby_names`); else replication is
    asynchronous and the last commits may be lost in a failover."""

    def __init__(
        self, *, synchronous: bool, database: str = "postgres", fsync: bool = False
    ) -> None:
        binaries = postgres_bin()
        if binaries is None:
            raise RuntimeError("no PostgreSQL server binaries (/usr/lib/postgresql/*/bin)")
        self.bin = binaries
        self.synchronous = synchronous
        self.fsync = fsync  # off in tests: the pair lives for one test; on in the bench
        self.database = database
        self.primary_port = free_ports(2)
        self.standby_port = self.primary_port + 1
        self.root = Path(tempfile.mkdtemp(prefix="denpyo-pair-"))
        self.promoted = False
        self.link: ProxyProcess | None = None

    # -- the URLs ------------------------------------------------------------------

    def server_url(self, port: int, database: str | None = None) -> str:
        return f"postgresql://postgres@127.0.0.1:{port}/{database or self.database}"

    @property
    def primary_url(self) -> str:
        return self.server_url(self.primary_port)

    @property
    def standby_url(self) -> str:
        return self.server_url(self.standby_port)

    @property
    def url(self) -> str:
        """Both hosts: libpq tries them in turn and keeps the one that takes writes."""
        return (
            f"postgresql://postgres@127.0.0.1:{self.primary_port},127.0.0.1:{self.standby_port}"
            f"/{self.database}?target_session_attrs=read-write"
        )

    # -- life ----------------------------------------------------------------------

    def __enter__(self) -> PgPair:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _start(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
        self.root.chmod(0o700)
        primary, standby = self.root / "primary", self.root / "standby"
        self._run(
            "initdb", "-D", primary, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8"
        )
        settings = [
            f"port = {self.primary_port}",
            "listen_addresses = '127.0.0.1'",
            f"unix_socket_directories = '{self.root}'",
            "wal_level = replica",
            "max_wal_senders = 5",
            f"fsync = {'on' if self.fsync else 'off'}",
            "max_connections = 100",
        ]
        if self.synchronous:
            settings.append(f"synchronous_standby_names = '{STANDBY_NAME}'")
        with (primary / "postgresql.conf").open("a") as conf:
            conf.write("\n".join(settings) + "\n")
        with (primary / "pg_hba.conf").open("a") as hba:
            hba.write("host replication all 127.0.0.1/32 trust\n")
        self._ctl("start", primary)
        self.link = ProxyProcess("127.0.0.1", self.primary_port)
        self._run(
            "pg_basebackup",
            "-h",
            "127.0.0.1",
            "-p",
            str(self.primary_port),
            "-U",
            "postgres",
            "-D",
            standby,
            "-R",
            "-X",
            "stream",
            "--no-sync",
        )
        with (standby / "postgresql.auto.conf").open("a") as conf:
            conf.write(
                f"port = {self.standby_port}\n"
                f"primary_conninfo = 'host=127.0.0.1 port={self.link.port} user=postgres "
                f"application_name={STANDBY_NAME}'\n"
            )
        self._ctl("start", standby)
        self.wait_streaming()

    def wait_streaming(self, timeout: float = 30.0) -> None:
        """Until the primary sees its standby streaming (in sync, when synchronous)."""
        want = "sync" if self.synchronous else "async"
        deadline = time.monotonic() + timeout
        while True:
            with psycopg.connect(self.server_url(self.primary_port, "postgres")) as conn:
                row = conn.execute(
                    "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s",
                    (STANDBY_NAME,),
                ).fetchone()
            if row and row[0] == want:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the standby is not streaming ({row})")
            time.sleep(0.1)

    def wait_replayed(self, timeout: float = 30.0) -> None:
        """Until the standby has replayed every commit the primary made so far."""
        with psycopg.connect(self.server_url(self.primary_port, "postgres")) as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        deadline = time.monotonic() + timeout
        with psycopg.connect(self.server_url(self.standby_port, "postgres")) as conn:
            while True:
                done = conn.execute(
                    "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (row[0],)
                ).fetchone()
                if done and done[0]:
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError("the standby did not catch up")
                time.sleep(0.05)

    def stop_standby(self) -> None:
        """The standby stops (the primary then has none streaming)."""
        self._ctl("stop", self.root / "standby", "-m", "fast")

    def fall_behind(self, seconds: float) -> None:
        """For `seconds`, the standby receives nothing of what the primary commits (the
        replication link black-holed, its bytes thrown away): a lagging asynchronous
        standby. With a synchronous one, every commit waits meanwhile."""
        assert self.link is not None
        self.link.blackhole(seconds)

    def fail_over(self) -> None:
        """The primary dies (`-m immediate`: no shutdown checkpoint, no last WAL sent)
        and the standby is promoted: what Patroni or RDS does when a primary is lost."""
        self._ctl("stop", self.root / "primary", "-m", "immediate")
        self._ctl("promote", self.root / "standby")
        self.promoted = True
        # The new primary has no standby of its own: were it to keep the old one's
        # synchronous_standby_names, every commit would wait for ever. (Patroni
        # clears it the same way when no synchronous standby is left.)
        with psycopg.connect(
            self.server_url(self.standby_port, "postgres"), autocommit=True
        ) as conn:
            conn.execute("ALTER SYSTEM SET synchronous_standby_names = ''")
            conn.execute("SELECT pg_reload_conf()")

    def close(self) -> None:
        if self.link is not None:
            self.link.close()
        for name in ("primary", "standby"):
            folder = self.root / name
            if (folder / "postmaster.pid").exists():
                with contextlib.suppress(subprocess.CalledProcessError):
                    self._ctl("stop", folder, "-m", "immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    # -- running the binaries ----------------------------------------------------------

    def _ctl(self, action: str, folder: Path, *more: str) -> None:
        log = folder.parent / f"{folder.name}.log"
        self._run("pg_ctl", action, "-D", folder, "-l", log, "-w", *more)

    def _run(self, program: str, *args: object) -> None:
        command = [str(self.bin / program), *map(str, args)]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(
            command, check=True, capture_output=True, cwd=self.root, env=_env(), timeout=60
        )


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PGDATA", None)
    with contextlib.suppress(KeyError):
        env["HOME"] = pwd.getpwnam("postgres").pw_dir
    return env
