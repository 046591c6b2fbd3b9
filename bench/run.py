"""denpyo's benchmarks against what a user would pick instead; writes docs/benchmarks.md.

    .venv/bin/python bench/run.py                 # everything, at the issue's sizes
    .venv/bin/python bench/run.py --quick         # a smoke run with tiny sizes
    .venv/bin/python bench/run.py --only dispatch,inline --repeats 5
    .venv/bin/python bench/run.py --only processes --processes 1,2,4

It creates ``bench/.venv-peers`` (the peers' own virtualenv, so that their
dependency pins never touch the project's), starts PostgreSQL if it is not
running, starts the loopback fake provider (``python -m denpyo.testing``) for
each latency, and runs every measurement as its own process on a fresh
database. Raw results go to ``bench/results/`` (JSON); the report and its plot
are rendered from them by ``bench/report.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

import report  # noqa: E402
from common import machine_busy, proc_cpu  # noqa: E402

PEERS_VENV = BENCH / ".venv-peers"
PEER_REQUIREMENTS = [
    "dbos",
    "procrastinate",
    "pgqueuer",
    "asyncpg",
    "aiohttp",
    "psycopg[binary]",
    "psycopg-pool",
    "matplotlib",
    "py-spy",
    "pyinstrument",
    "urllib3",
    "requests",
    "httpx",
]
VERSIONED = [
    "denpyo",
    "dbos",
    "procrastinate",
    "pgqueuer",
    "asyncpg",
    "aiohttp",
    "psycopg",
    "psycopg-pool",
    "urllib3",
    "requests",
    "httpx",
    "matplotlib",
    "py-spy",
    "pyinstrument",
]
ALL_PEERS = [
    "fire_and_forget",
    "outbox",
    "pgqueuer",
    "procrastinate",
    "dbos",
    "denpyo",
    "denpyo_nocall",
    "denpyo_store",
    "floor_psycopg",
    "floor_asyncpg",
    "floor_call",
]
NO_CALL = set(report.NO_CALL)  # parts of denpyo, not peers: run at 0 ms only, not in enqueue
NO_BULK = {"dbos", "fire_and_forget"}
ALL_SCENARIOS = [
    "dispatch",
    "processes",
    "inline",
    "enqueue",
    "recovery",
    "scale",
    "backends",
    "memory",
    "partitions",
    "fleet",
    "bulk",
    "sealing",
    "tracing",
    "replication",
]
PG_URL = os.environ.get(
    "DENPYO_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
MYSQL_URL = os.environ.get("DENPYO_BENCH_MYSQL_URL", "mysql://root@127.0.0.1:3306/mysql")


@dataclass
class Sizes:
    dispatch_n: int
    concurrency: list[int]
    latencies: list[float]
    repeats: int
    inline_n: int
    enqueue_n: int
    recovery_n: int
    scale_levels: list[int]
    httpclient_n: int
    backends: list[str] = field(default_factory=lambda: ["sqlite", "mysql", "postgresql"])
    peer_n: dict[str, int] = field(default_factory=dict)
    backend_n: int | None = None
    memory_levels: list[int] = field(default_factory=lambda: [10**4, 10**5, 10**6])
    # (latency s, calls in flight) measured besides the grid: a realistic provider
    realistic: list[tuple[float, int]] = field(default_factory=lambda: [(0.2, 256)])
    # `processes`: worker processes, and (latency s, calls in flight per process)
    processes: list[int] = field(default_factory=lambda: [1, 2, 4])
    processes_configs: list[tuple[float, int]] = field(
        default_factory=lambda: [(0.02, 16), (0.2, 256)]
    )
    processes_n: int = 20_000

    def n_for(self, peer: str) -> int:
        return self.peer_n.get(peer, self.dispatch_n)

    def dispatch_configs(self) -> list[tuple[float, int]]:
        """The grid (latencies × concurrency), then the realistic pairs not in it."""
        grid = [(lat, c) for lat in self.latencies for c in self.concurrency]
        return grid + [pair for pair in self.realistic if pair not in grid]


FULL = Sizes(
    dispatch_n=20_000,
    concurrency=[16, 64],
    latencies=[0.0, 0.02],
    repeats=3,
    inline_n=2_000,
    enqueue_n=20_000,
    recovery_n=10_000,
    scale_levels=[10**5, 10**6, 10**7],
    httpclient_n=2_000,
)
QUICK = Sizes(
    dispatch_n=200,
    concurrency=[16],
    latencies=[0.0],
    repeats=1,
    inline_n=30,
    enqueue_n=200,
    recovery_n=200,
    scale_levels=[1_000, 10_000],
    httpclient_n=50,
    backends=["sqlite"],
    memory_levels=[100, 1_000],
    processes=[2],  # the supervisor; one process is the dispatch scenario's worker
    processes_configs=[(0.02, 16)],
    processes_n=200,
)


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- environment ------------------------------------------------------------------------


def ensure_peers_venv() -> Path:
    """bench/.venv-peers with the peers, the shared HTTP client and denpyo (editable)."""
    python = PEERS_VENV / "bin" / "python"
    # denpyo with the extras its stores and channel need: the core alone is SQLite.
    editable = f"{ROOT}[postgresql,mysql,http]"
    wanted = "\n".join([*PEER_REQUIREMENTS, f"-e {editable}"])
    stamp = PEERS_VENV / ".installed"
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    if not python.exists():
        log(f"creating {PEERS_VENV}")
        subprocess.run([sys.executable, "-m", "venv", str(PEERS_VENV)], check=True)
    log("installing the peers into bench/.venv-peers (pip)")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
    failed: list[str] = []
    for requirement in [*PEER_REQUIREMENTS, "-e"]:
        args = ["-e", editable] if requirement == "-e" else [requirement]
        result = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", *args], capture_output=True, text=True
        )
        if result.returncode != 0:
            failed.append(f"{' '.join(args)}: {result.stderr.strip().splitlines()[-1:]}")
            log(f"pip install {' '.join(args)} failed: {result.stderr.strip()[-500:]}")
    if not failed:
        stamp.write_text(wanted)
    return python


def ensure_postgres() -> None:
    if subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1", "-p", "5432"]).returncode == 0:
        return
    log("starting PostgreSQL")
    version = sorted(os.listdir("/etc/postgresql"))[0]
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "start"], check=False
    )
    for _ in range(60):
        if subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1", "-p", "5432"]).returncode == 0:
            return
        time.sleep(1)
    raise SystemExit("PostgreSQL did not come up on 127.0.0.1:5432")


def _with_db(url: str, name: str) -> str:
    return f"{url.rpartition('/')[0]}/{name}"


# What a child's or the parent's error says when PostgreSQL went away under it (the
# machine is shared: another session's chaos test restarts the server): such a run is
# repeated once the server answers again.
TRANSIENT = (
    "AdminShutdown",
    "terminating connection",
    "the database system is",
    "server closed the connection",
    "connection failed",
    "Connection refused",
    "consuming input failed",
    "ConnectorException",
    "cannot connect to PostgreSQL",
    "OperationalError",
)


def wait_for_postgres(seconds: int = 120) -> None:
    for _ in range(seconds):
        if subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1", "-p", "5432"]).returncode == 0:
            return
        time.sleep(1)


class Databases:
    """Fresh PostgreSQL databases, each dropped after its run."""

    def __init__(self) -> None:
        self.admin: Any = None
        self._connect()

    def _connect(self) -> None:
        import psycopg

        self.admin = psycopg.connect(PG_URL, autocommit=True)

    def _execute(self, sql: str) -> Any:
        import psycopg

        for attempt in range(5):
            try:
                return self.admin.execute(sql)
            except psycopg.OperationalError as exc:
                log(f"PostgreSQL went away ({type(exc).__name__}); waiting for it")
                time.sleep(2 + attempt * 3)
                wait_for_postgres()
                try:
                    self.admin.close()
                    self._connect()
                except psycopg.OperationalError:
                    continue
        return self.admin.execute(sql)

    def create(self, template: str | None = None) -> str:
        name = f"denpyo_bench_{uuid.uuid4().hex[:10]}"
        clause = f" TEMPLATE {template}" if template else ""
        self._execute(f"CREATE DATABASE {name}{clause}")
        return name

    def url(self, name: str) -> str:
        return _with_db(PG_URL, name)

    def drop(self, name: str) -> None:
        self._execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def server_version(self) -> str:
        row = self._execute("SHOW server_version").fetchone()
        return str(row[0]) if row else "?"

    def close(self) -> None:
        self.admin.close()


class MysqlDatabases:
    def __init__(self) -> None:
        import pymysql

        parts = MYSQL_URL.split("://", 1)[1]
        user, _, hostport = parts.split("/", 1)[0].rpartition("@")
        host, _, port = hostport.partition(":")
        self.admin = pymysql.connect(
            host=host, port=int(port or 3306), user=user or "root", autocommit=True
        )

    def create(self) -> str:
        name = f"denpyo_bench_{uuid.uuid4().hex[:10]}"
        self.admin.cursor().execute(f"CREATE DATABASE {name}")
        return name

    def url(self, name: str) -> str:
        return _with_db(MYSQL_URL, name)

    def drop(self, name: str) -> None:
        self.admin.cursor().execute(f"DROP DATABASE IF EXISTS {name}")

    def server_version(self) -> str:
        cursor = self.admin.cursor()
        cursor.execute("SELECT version()")
        return str(cursor.fetchone()[0])


class Provider:
    """`python -m denpyo.testing` as its own process, on a free loopback port."""

    def __init__(self, python: str, latency: float) -> None:
        self.latency = latency
        self.proc = subprocess.Popen(
            [python, "-m", "denpyo.testing", "--port", "0", "--latency", str(latency)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=ROOT,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line.startswith("listening on "):
            self.proc.kill()
            raise RuntimeError(f"the fake provider did not start: {line!r}")
        self.url = line.removeprefix("listening on ")

    def _call(self, method: str, path: str) -> Any:
        data = b"{}" if method == "POST" else None
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def reset(self) -> None:
        self._call("POST", "/reset")

    def stats(self) -> dict[str, int]:
        return dict(self._call("GET", "/stats"))

    def cpu_seconds(self) -> float:
        return proc_cpu(self.proc.pid)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# -- running one child ------------------------------------------------------------------


class Runner:
    def __init__(self, python: str, logs: Path, timeout: float) -> None:
        self.python = python
        self.logs = logs
        self.timeout = timeout
        self.count = 0
        self.profile: str | None = None

    def run(self, spec: dict[str, Any], provider: Provider | None = None) -> dict[str, Any]:
        """Run child.py with `spec`; returns its result plus peak RSS and CPU use.
        A failed child gives {"error": ...} instead of raising."""
        self.count += 1
        label = f"{self.count:04d}-{spec['scenario']}-{spec.get('peer', '')}"
        out_path, err_path = self.logs / f"{label}.out", self.logs / f"{label}.err"
        command = [self.python, str(BENCH / "child.py"), json.dumps(spec)]
        if self.profile and spec.get("py_spy"):
            command = [
                str(Path(self.python).parent / "py-spy"),
                "record",
                "--format",
                "raw",
                "--rate",
                "250",
                "-o",
                spec["py_spy"],
                "--",
                *command,
            ]
        provider_cpu = provider.cpu_seconds() if provider else 0.0
        busy = machine_busy()
        started = time.perf_counter()
        with out_path.open("w") as out, err_path.open("w") as err:
            proc = subprocess.Popen(command, stdout=out, stderr=err, cwd=ROOT)
            timer = threading.Timer(self.timeout, proc.kill)
            timer.start()
            try:
                _, status, usage = os.wait4(proc.pid, 0)
            finally:
                timer.cancel()
            proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        measured = {
            "maxrss_kb": usage.ru_maxrss,
            "child_cpu_s": usage.ru_utime + usage.ru_stime,
            "provider_cpu_s": (provider.cpu_seconds() - provider_cpu) if provider else 0.0,
            "machine_busy_s": machine_busy() - busy,
            "wall_s": wall,
        }
        result: dict[str, Any] | None = None
        for line in out_path.read_text().splitlines():
            if line.startswith("BENCH-RESULT "):
                result = json.loads(line.removeprefix("BENCH-RESULT "))
        if proc.returncode != 0 or result is None:
            tail = err_path.read_text().strip().splitlines()[-6:]
            reason = f"exit {proc.returncode}: " + " | ".join(tail)
            log(f"{label} failed: {reason[-600:]}")
            return {"error": reason[-2000:], **measured}
        return {**result, **measured}


# -- the scenarios ------------------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace, python: str, sizes: Sizes) -> None:
        self.args = args
        self.python = python
        self.sizes = sizes
        self.results: dict[str, Any] = {"notes": [], "unavailable": {}}
        run_id = time.strftime("%Y%m%d-%H%M%S")
        self.out_dir = Path(args.results_dir) / run_id
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / "logs").mkdir(exist_ok=True)
        self.runner = Runner(python, self.out_dir / "logs", args.child_timeout)
        self.runner.profile = args.profile
        self.dbs = Databases()
        self.providers: dict[float, Provider] = {}
        self.peers: list[str] = []

    # plumbing

    def retrying(self, attempt: Any) -> dict[str, Any]:
        """Call `attempt()` (which sets up its own fresh database) again, up to 3 times,
        when PostgreSQL went away under it; `retried` counts those repeats."""
        retried = 0
        while True:
            result: dict[str, Any] = attempt()
            error = str(result.get("error", ""))
            if not error or retried >= 3 or not any(mark in error for mark in TRANSIENT):
                break
            retried += 1
            log("PostgreSQL went away during the run; repeating it once it is back")
            time.sleep(5)
            wait_for_postgres()
        if retried:
            result["retried"] = retried
        return result

    def on_fresh_db(
        self, scenario: str, provider: Provider | None = None, **fields: Any
    ) -> dict[str, Any]:
        """Run one child on a fresh PostgreSQL database (dropped after), repeated with a
        new database if PostgreSQL went away under it."""

        def attempt() -> dict[str, Any]:
            name = self.dbs.create()
            if provider is not None:
                provider.reset()
            try:
                return self.runner.run(
                    self.spec(scenario, db_url=self.dbs.url(name), **fields), provider
                )
            finally:
                self.dbs.drop(name)

        return self.retrying(attempt)

    def provider(self, latency: float) -> Provider:
        if latency not in self.providers:
            self.providers[latency] = Provider(self.python, latency)
            log(f"fake provider ({latency * 1000:g} ms) at {self.providers[latency].url}")
        return self.providers[latency]

    def save(self) -> Path:
        path = self.out_dir / "results.json"
        path.write_text(json.dumps(self.results, indent=1, default=str))
        return path

    def close(self) -> None:
        for provider in self.providers.values():
            provider.stop()
        self.dbs.close()

    def spec(self, scenario: str, **fields: Any) -> dict[str, Any]:
        return {"scenario": scenario, **fields}

    # probe

    def probe(self) -> None:
        result = self.runner.run(
            self.spec("probe", packages=VERSIONED, peers=self.args.peers.split(","))
        )
        if "error" in result:
            raise SystemExit(f"the scenario interpreter does not work: {result['error']}")
        self.results["meta"] = report.machine_meta(
            self.dbs.server_version(), result, self.args, self.sizes
        )
        try:
            self.results["meta"]["mariadb"] = MysqlDatabases().server_version()
        except Exception as exc:
            self.results["meta"]["mariadb"] = f"not reachable ({type(exc).__name__})"
        for peer, problem in result["peers"].items():
            if problem:
                self.results["unavailable"][peer] = f"does not import here: {problem}"
            else:
                self.peers.append(peer)
        self.stores = result["stores"]
        self.save()

    # 1. dispatch

    def prefill(self, peer: str, n: int) -> tuple[str | None, dict[str, Any]]:
        """A template database holding the peer's schema and n enqueued jobs."""
        if peer == "fire_and_forget":
            return None, {}
        result = self.retrying(lambda: self._prefill(peer, n))
        return result.pop("_template", None), result

    def _prefill(self, peer: str, n: int, bulk: bool = False) -> dict[str, Any]:
        name = self.dbs.create()
        result = self.runner.run(
            self.spec(
                "enqueue",
                peer=peer,
                n=n,
                bulk=bulk,  # by default one transaction per job, as jobs arrive in an application
                setup=True,
                db_url=self.dbs.url(name),
                provider_url=self.provider(0.0).url,
            )
        )
        if "error" in result:
            self.dbs.drop(name)
            return result
        return {"_template": name, **result}

    def dispatch(self) -> None:
        s = self.sizes
        rows: list[dict[str, Any]] = self.results.setdefault("dispatch", [])
        prefill: dict[str, Any] = self.results.setdefault("prefill", {})
        templates: dict[str, str | None] = {}
        for peer in self.peers:
            log(f"dispatch: enqueueing {s.n_for(peer):,} jobs for {peer}")
            template, result = self.prefill(peer, s.n_for(peer))
            prefill[peer] = result
            if "error" in result:
                self.results["unavailable"][peer] = f"enqueue failed: {result['error']}"
                continue
            templates[peer] = template
        self.save()
        try:
            for repeat in range(s.repeats):
                for latency, concurrency in s.dispatch_configs():
                    provider = self.provider(latency)
                    for peer in templates:
                        if peer in NO_CALL and latency > 0:
                            continue  # no call: the provider's latency changes nothing
                        row = self.dispatch_once(
                            peer, templates[peer], provider, concurrency, repeat
                        )
                        rows.append(row)
                        self.save()
        finally:
            for template in templates.values():
                if template:
                    self.dbs.drop(template)

    def dispatch_once(
        self,
        peer: str,
        template: str | None,
        provider: Provider,
        concurrency: int,
        repeat: int,
        backend: str = "postgresql",
        db_url: str | None = None,
        n: int | None = None,
    ) -> dict[str, Any]:
        args = (peer, template, provider, concurrency, repeat, backend, db_url, n)
        if db_url is not None:  # SQLite or MariaDB: PostgreSQL restarts do not touch it
            return self._dispatch_once(*args)
        return self.retrying(lambda: self._dispatch_once(*args))

    def _dispatch_once(
        self,
        peer: str,
        template: str | None,
        provider: Provider,
        concurrency: int,
        repeat: int,
        backend: str,
        db_url: str | None,
        n: int | None,
    ) -> dict[str, Any]:
        name = self.dbs.create(template) if template else None
        url = db_url or (self.dbs.url(name) if name else "")
        provider.reset()
        n = n or self.sizes.n_for(peer)
        spec = self.spec(
            "dispatch",
            peer=peer,
            n=n,
            concurrency=concurrency,
            db_url=url,
            provider_url=provider.url,
        )
        label = f"{peer}-{backend}-{provider.latency * 1000:g}ms-c{concurrency}-r{repeat}"
        if self.args.profile and peer in self.args.profile_peers.split(","):
            if self.args.profile == "pyinstrument":
                spec["profile"] = "pyinstrument"
                spec["profile_out"] = str(self.out_dir / f"profile-{label}.txt")
            else:
                spec["py_spy"] = str(self.out_dir / f"pyspy-{label}.txt")
        try:
            result = self.runner.run(spec, provider)
        finally:
            if name:
                self.dbs.drop(name)
        row = {
            "peer": peer,
            "backend": backend,
            "latency_ms": provider.latency * 1000,
            "concurrency": concurrency,
            "repeat": repeat,
            "n": n,
            **result,
        }
        rate = row.get("rate")
        log(
            f"dispatch {label}: "
            + (f"{rate:,.0f} jobs/s" if rate else "FAILED")
            + f", peak RSS {row['maxrss_kb'] / 1024:.0f} MiB, ok={row.get('ok')}"
        )
        return row

    # 7. processes: `denpyo worker --processes N` through the real command line

    def processes(self) -> None:
        """denpyo's worker command with N processes, beside fire-and-forget with the
        same calls in flight in total, at each (latency, in flight per process)."""
        s = self.sizes
        rows: list[dict[str, Any]] = self.results.setdefault("processes", [])
        if "denpyo" not in self.peers or "fire_and_forget" not in self.peers:
            self.results["unavailable"]["processes"] = "needs the denpyo and fire_and_forget peers"
            return
        log(f"processes: enqueueing {s.processes_n:,} jobs for denpyo")
        template, result = self.prefill("denpyo", s.processes_n)
        self.results.setdefault("prefill", {})["denpyo (processes)"] = result
        if "error" in result or template is None:
            self.results["unavailable"]["processes"] = f"enqueue failed: {result.get('error')}"
            return
        try:
            for repeat in range(s.repeats):
                for latency, per_process in s.processes_configs:
                    provider = self.provider(latency)
                    for count in s.processes:
                        for peer in ("denpyo", "fire_and_forget"):
                            row = self.processes_once(
                                peer, template, provider, count, per_process, repeat
                            )
                            rows.append(row)
                            self.save()
        finally:
            self.dbs.drop(template)

    def processes_once(
        self,
        peer: str,
        template: str,
        provider: Provider,
        count: int,
        per_process: int,
        repeat: int,
    ) -> dict[str, Any]:
        n = self.sizes.processes_n
        total = count * per_process
        label = f"{peer}-{provider.latency * 1000:g}ms-p{count}x{per_process}-r{repeat}"

        def attempt() -> dict[str, Any]:
            provider.reset()
            if peer == "fire_and_forget":  # one process, the same calls in flight in total
                spec = self.spec(
                    "dispatch", peer=peer, n=n, concurrency=total, provider_url=provider.url
                )
                return self.runner.run(spec, provider)
            name = self.dbs.create(template)
            try:
                spec = self.spec(
                    "processes",
                    db_url=self.dbs.url(name),
                    provider_url=provider.url,
                    n=n,
                    processes=count,
                    concurrency=per_process,
                    log=str(self.out_dir / "logs" / f"workers-{label}.log"),
                )
                return self.runner.run(spec, provider)
            finally:
                self.dbs.drop(name)

        row = {
            "peer": peer,
            "latency_ms": provider.latency * 1000,
            "processes": count,
            "per_process": per_process,
            "concurrency": total,
            "repeat": repeat,
            "n": n,
            **self.retrying(attempt),
        }
        rate = row.get("rate")
        log(
            f"processes {label}: "
            + (f"{rate:,.0f} jobs/s" if rate else "FAILED")
            + f", ok={row.get('ok')}"
        )
        return row

    # 6. the same dispatch on SQLite and MariaDB (and PostgreSQL again, same run)

    def backends(self) -> None:
        s = self.sizes
        rows: list[dict[str, Any]] = self.results.setdefault("backends", [])
        if "denpyo" not in self.peers:
            return
        for backend in s.backends:
            if backend == "mysql" and self.stores.get("mysql"):
                self.results["unavailable"]["denpyo on MariaDB"] = (
                    f"denpyo has no MySQL/MariaDB store in this tree yet ({self.stores['mysql']})"
                )
                continue
            for repeat in range(s.repeats):
                for latency in s.latencies:
                    provider = self.provider(latency)
                    for concurrency in s.concurrency:
                        row = self.backend_once(backend, provider, concurrency, repeat)
                        rows.append(row)
                        self.save()

    @property
    def backend_n(self) -> int:
        return self.sizes.backend_n or self.sizes.dispatch_n

    def backend_once(
        self, backend: str, provider: Provider, concurrency: int, repeat: int
    ) -> dict[str, Any]:
        n = self.backend_n
        if backend == "postgresql":
            template, result = self.prefill("denpyo", n)
            try:
                if "error" in result:
                    return {"backend": backend, "peer": "denpyo", **result}
                return self.dispatch_once(
                    "denpyo", template, provider, concurrency, repeat, backend=backend, n=n
                )
            finally:
                if template:
                    self.dbs.drop(template)
        if backend == "sqlite":
            template = self.sqlite_template(provider)
            if isinstance(template, dict):
                return {"backend": backend, "peer": "denpyo", "repeat": repeat, **template}
            folder = Path(tempfile.mkdtemp(prefix="denpyo-bench-"))
            shutil.copy(template, folder / "bench.db")
            if Path(f"{template}-wal").exists():
                shutil.copy(f"{template}-wal", folder / "bench.db-wal")
            url = f"sqlite:///{folder}/bench.db"
            try:
                return self.dispatch_once(
                    "denpyo", None, provider, concurrency, repeat, backend=backend, db_url=url, n=n
                )
            finally:
                shutil.rmtree(folder, ignore_errors=True)
        else:
            mysql = MysqlDatabases()
            name = mysql.create()
            url = mysql.url(name)
            cleanup = lambda: mysql.drop(name)  # noqa: E731
        try:
            result = self.runner.run(
                self.spec(
                    "enqueue",
                    peer="denpyo",
                    n=n,
                    bulk=False,
                    setup=True,
                    db_url=url,
                    provider_url=provider.url,
                )
            )
            if "error" in result:
                return {"backend": backend, "peer": "denpyo", "repeat": repeat, **result}
            return self.dispatch_once(
                "denpyo", None, provider, concurrency, repeat, backend=backend, db_url=url, n=n
            )
        finally:
            cleanup()

    def sqlite_template(self, provider: Provider) -> Path | dict[str, Any]:
        """One SQLite file with the jobs enqueued (one transaction each), copied per run."""
        if getattr(self, "_sqlite_template", None) is None:
            folder = Path(tempfile.mkdtemp(prefix="denpyo-bench-template-"))
            path = folder / "bench.db"
            result = self.runner.run(
                self.spec(
                    "enqueue",
                    peer="denpyo",
                    n=self.backend_n,
                    bulk=False,
                    setup=True,
                    db_url=f"sqlite:///{path}",
                    provider_url=provider.url,
                )
            )
            if "error" in result:
                return result
            self.results.setdefault("prefill", {})["denpyo (sqlite)"] = result
            self._sqlite_template: Path | None = path
        assert self._sqlite_template is not None
        return self._sqlite_template

    # 2. inline

    def inline(self) -> None:
        s = self.sizes
        provider = self.provider(0.0)
        clients = self.runner.run(
            self.spec("httpclients", n=s.httpclient_n, rounds=s.repeats, provider_url=provider.url),
            provider,
        )
        section: dict[str, Any] = {"httpclients": clients, "runs": []}
        self.results["inline"] = section
        client = clients.get("fastest", "http.client")
        for backend in ("sqlite", "postgresql"):
            fields = {"n": s.inline_n, "rounds": s.repeats, "client": client}
            if backend == "postgresql":
                result = self.on_fresh_db("inline", provider, provider_url=provider.url, **fields)
            else:
                folder = Path(tempfile.mkdtemp(prefix="denpyo-bench-"))
                try:
                    provider.reset()
                    result = self.runner.run(
                        self.spec(
                            "inline",
                            db_url=f"sqlite:///{folder}/inline.db",
                            provider_url=provider.url,
                            **fields,
                        ),
                        provider,
                    )
                finally:
                    shutil.rmtree(folder, ignore_errors=True)
            section["runs"].append({"backend": backend, **result})
            log(f"inline {backend}: {result.get('us_per_call', result.get('error'))}")
            self.save()

    # 3. enqueue

    def enqueue(self) -> None:
        s = self.sizes
        rows: list[dict[str, Any]] = self.results.setdefault("enqueue", [])
        cases: list[tuple[str, str, bool, dict[str, Any]]] = []
        for peer in self.peers:
            if peer in ("fire_and_forget", "floor_call") or peer in NO_CALL:
                continue
            cases.append((peer, "single", False, {}))
            if peer == "denpyo":
                cases.append(
                    (peer, "single (caller's transaction)", False, {"enqueue_mode": "conn"})
                )
                # The baseline of a bulk enqueue: the same rows into the same table by hand.
                cases.append((peer, "hand-written", True, {"enqueue_mode": "handwritten"}))
            if peer not in NO_BULK:
                cases.append((peer, "bulk", True, {}))
        for repeat in range(s.repeats):
            for peer, mode, bulk, options in cases:
                result = self.on_fresh_db(
                    "enqueue",
                    peer=peer,
                    n=s.enqueue_n,
                    bulk=bulk,
                    setup=True,
                    provider_url=self.provider(0.0).url,
                    options=options,
                )
                rows.append(
                    {"peer": peer, "mode": mode, "repeat": repeat, "n": s.enqueue_n, **result}
                )
                rate = result.get("rate")
                log(f"enqueue {peer} {mode}: " + (f"{rate:,.0f}/s" if rate else "FAILED"))
                self.save()

    # 4. recovery

    def recovery(self) -> None:
        s = self.sizes
        rows: list[dict[str, Any]] = self.results.setdefault("recovery", [])
        provider = self.provider(0.0)
        for repeat in range(s.repeats):
            result = self.on_fresh_db(
                "recovery",
                provider,
                n=s.recovery_n,
                concurrency=16,
                provider_url=provider.url,
                provider_pid=provider.proc.pid,
            )
            rows.append({"repeat": repeat, "n": s.recovery_n, **result})
            log(
                f"recovery: {result.get('rate', 0):,.0f} rows/s against lookups at "
                f"{result.get('lookup_rate', 0):,.0f}/s"
            )
            self.save()

    # 5. scale

    def scale(self) -> None:
        result = self.on_fresh_db(
            "scale",
            levels=self.sizes.scale_levels,
            live=2000 if self.sizes.scale_levels[-1] >= 10**5 else 700,
        )
        self.results["scale"] = result
        for level in result.get("levels", []):
            log(
                f"scale {level['rows']:,}: claim {min(level['claim_ms']):.2f}.."
                f"{max(level['claim_ms']):.2f} ms, status {min(level['status_ms']):.1f} ms"
            )
        self.save()

    # 8. memory: does the worker's peak RSS stay flat as the rows it dispatched grow?

    def memory(self) -> None:
        rows: list[dict[str, Any]] = self.results.setdefault("memory", [])
        provider = self.provider(0.0)
        for n in self.sizes.memory_levels:
            log(f"memory: enqueueing {n:,} jobs (enqueue_many)")
            result = self.retrying(lambda n=n: self._prefill("denpyo", n, bulk=True))
            template = result.pop("_template", None)
            if "error" in result or not template:
                rows.append({"n": n, "error": result.get("error", "no template")})
                continue
            try:
                rows.append(self.dispatch_once("denpyo", template, provider, 64, 0, n=n))
            finally:
                self.dbs.drop(template)
            self.save()

    def partitions(self) -> None:
        """PostgreSQL's partitioned layout against the plain one (bench/partitions.py):
        30 days of 250,000 rows (about 45 minutes here; its own default, a million
        rows a day, takes over two hours), or tiny sizes with --quick."""
        sizes = (
            [
                "--days",
                "2",
                "--per-day",
                "2000",
                "--rows",
                "200",
                "--submits",
                "100",
                "--size-days",
                "5",
                "--size-kept",
                "2",
                "--size-per-day",
                "1000",
            ]
            if self.args.quick
            else ["--per-day", "250000"]
        )
        out = self.out_dir / "partitions.json"
        done = subprocess.run(
            [sys.executable, str(ROOT / "bench" / "partitions.py"), *sizes, "--json", str(out)],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        )
        if done.returncode != 0:
            self.results["partitions"] = {"error": done.stderr[-2000:]}
        else:
            self.results["partitions"] = json.loads(out.read_text())
        self.save()

    def fleet(self) -> None:
        """Worker processes against a provider's limits and outage, and the CPU per call
        with no limit against the commit before the fleet limits (bench/fleet.py): about
        5 minutes, or about one with --quick."""
        out = self.out_dir / "fleet.json"
        done = subprocess.run(
            [
                sys.executable,
                str(ROOT / "bench" / "fleet.py"),
                *(["--quick"] if self.args.quick else []),
                "--json",
                str(out),
                "--logs",
                str(self.out_dir / "logs" / "fleet"),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        )
        if done.returncode != 0:
            self.results["fleet"] = {"error": done.stderr[-2000:]}
        else:
            self.results["fleet"] = json.loads(out.read_text())
        self.save()

    def bulk(self) -> None:
        """A person's bulk retry of 100,000 rows on PostgreSQL, and a worker's rate while
        it runs (bench/bulk.py): about 4 minutes, or about 10 s with --quick."""
        out = self.out_dir / "bulk.json"
        done = subprocess.run(
            [
                sys.executable,
                str(ROOT / "bench" / "bulk.py"),
                *(["--quick"] if self.args.quick else []),
                "--json",
                str(out),
                "--logs",
                str(self.out_dir / "logs" / "bulk"),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        )
        if done.returncode != 0:
            self.results["bulk"] = {"error": done.stderr[-2000:]}
        else:
            self.results["bulk"] = json.loads(out.read_text())
        self.save()

    def _script(self, scenario: str) -> None:
        """Run bench/<scenario>.py, which writes its results as JSON (`--json`), with
        `--quick` when this run is quick; its last lines of stderr if it fails."""
        out = self.out_dir / f"{scenario}.json"
        done = subprocess.run(
            [
                sys.executable,
                str(ROOT / "bench" / f"{scenario}.py"),
                *(["--quick"] if self.args.quick else []),
                "--json",
                str(out),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        )
        if done.returncode != 0:
            self.results[scenario] = {"error": done.stderr[-2000:]}
        else:
            self.results[scenario] = json.loads(out.read_text())
        self.save()

    def sealing(self) -> None:
        """The CPU a call pays for payloads encrypted at rest, with and without a key, on
        SQLite and PostgreSQL (bench/sealing.py): about 4 minutes, or about 15 s with
        --quick."""
        self._script("sealing")

    def replication(self) -> None:
        """What a synchronous standby costs a call: inline submit latency and worker
        rate with no standby, an asynchronous one and a synchronous one, on a pair of
        PostgreSQL servers of its own (bench/replication.py): about 2 minutes, or
        about 20 s with --quick."""
        self._script("replication")

    def tracing(self) -> None:
        """What OpenTelemetry costs the worker: CPU per call without it, with the API
        alone and with the SDK, on SQLite and PostgreSQL (bench/tracing.py): about 5
        minutes, or about 30 s with --quick."""
        out = self.out_dir / "tracing.json"
        done = subprocess.run(
            [
                sys.executable,
                str(ROOT / "bench" / "tracing.py"),
                *(["--quick"] if self.args.quick else []),
                "--json",
                str(out),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        )
        if done.returncode != 0:
            self.results["tracing"] = {"error": done.stderr[-2000:]}
        else:
            self.results["tracing"] = json.loads(out.read_text())
        self.save()


# -- main ---------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a smoke run with tiny sizes")
    p.add_argument("--only", default=",".join(ALL_SCENARIOS), help="scenarios, comma-separated")
    p.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    p.add_argument("--plot", default=None, help="the PNG (default: beside --out)")
    p.add_argument(
        "--python",
        default=None,
        help="run the scenarios with this interpreter instead of bench/.venv-peers "
        "(nothing is installed then)",
    )
    p.add_argument("--peers", default=",".join(ALL_PEERS))
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--dispatch-n", type=int, default=None)
    p.add_argument("--concurrency", default=None, help="e.g. 16,64")
    p.add_argument("--latencies", default=None, help="seconds, e.g. 0,0.02")
    p.add_argument(
        "--peer-n",
        default="",
        help="dispatch size per peer where it differs, e.g. dbos=4000 (for peers too slow "
        "to run the full size in the time at hand; the report says so)",
    )
    p.add_argument("--backend-n", type=int, default=None, help="dispatch size in scenario 6")
    p.add_argument(
        "--realistic",
        default=None,
        help="dispatch configurations besides the grid, latency:in-flight, e.g. 0.2:256 "
        "('' for none)",
    )
    p.add_argument("--processes", default=None, help="worker processes to measure, e.g. 1,2,4")
    p.add_argument(
        "--processes-configs",
        default=None,
        help="latency:in-flight-per-process for `processes`, e.g. 0.02:16,0.2:256",
    )
    p.add_argument("--processes-n", type=int, default=None, help="jobs per `processes` run")
    p.add_argument("--enqueue-n", type=int, default=None)
    p.add_argument("--inline-n", type=int, default=None)
    p.add_argument("--recovery-n", type=int, default=None)
    p.add_argument("--scale-levels", default=None, help="e.g. 100000,1000000,10000000")
    p.add_argument("--backends", default=None, help="for scenario 6, e.g. sqlite,mysql,postgresql")
    p.add_argument(
        "--memory-levels", help="rows dispatched in scenario 8 (memory), e.g. 10000,100000,1000000"
    )
    p.add_argument("--results-dir", default=str(BENCH / "results"))
    p.add_argument("--child-timeout", type=float, default=3600.0)
    p.add_argument(
        "--profile",
        choices=["py-spy", "pyinstrument"],
        default=None,
        help="profile the dispatch runs of --profile-peers (slows them: not for the report)",
    )
    p.add_argument("--profile-peers", default="denpyo")
    p.add_argument("--no-report", action="store_true", help="leave --out alone")
    p.add_argument("--from-results", default=None, help="only render this results.json")
    p.add_argument(
        "--note",
        action="append",
        default=[],
        help="a sentence for the report's notes (e.g. what happened on the machine meanwhile)",
    )
    return p.parse_args(argv)


def sizes_for(args: argparse.Namespace) -> Sizes:
    base = QUICK if args.quick else FULL
    sizes = Sizes(**asdict(base))
    if args.repeats:
        sizes.repeats = args.repeats
    if args.dispatch_n:
        sizes.dispatch_n = args.dispatch_n
    if args.concurrency:
        sizes.concurrency = [int(x) for x in args.concurrency.split(",")]
    if args.latencies:
        sizes.latencies = [float(x) for x in args.latencies.split(",")]
    if args.peer_n:
        sizes.peer_n = {k: int(v) for k, v in (x.split("=") for x in args.peer_n.split(","))}
    if args.backend_n:
        sizes.backend_n = args.backend_n
    if args.enqueue_n:
        sizes.enqueue_n = args.enqueue_n
    if args.inline_n:
        sizes.inline_n = args.inline_n
    if args.recovery_n:
        sizes.recovery_n = args.recovery_n
    if args.scale_levels:
        sizes.scale_levels = [int(x) for x in args.scale_levels.split(",")]
    if args.backends:
        sizes.backends = args.backends.split(",")
    if args.memory_levels:
        sizes.memory_levels = [int(x) for x in args.memory_levels.split(",")]
    if args.realistic is not None:
        sizes.realistic = _pairs(args.realistic)
    if args.processes:
        sizes.processes = [int(x) for x in args.processes.split(",")]
    if args.processes_configs:
        sizes.processes_configs = _pairs(args.processes_configs)
    if args.processes_n:
        sizes.processes_n = args.processes_n
    return sizes


def _pairs(text: str) -> list[tuple[float, int]]:
    """`0.2:256,0.02:16` as [(0.2, 256), (0.02, 16)]."""
    pairs = []
    for item in filter(None, text.split(",")):
        latency, _, in_flight = item.partition(":")
        pairs.append((float(latency), int(in_flight)))
    return pairs


def _more_files() -> None:
    """Raise the soft limit on open files to the hard one: at 200 ms, a thousand
    calls in flight are a thousand sockets in the provider and in the worker."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out, plot = Path(args.out), Path(args.plot) if args.plot else Path(args.out).with_suffix(".png")
    if args.from_results:
        results = json.loads(Path(args.from_results).read_text())
        results.setdefault("notes", []).extend(args.note)
        report.write(results, out, plot, python=args.python or str(PEERS_VENV / "bin" / "python"))
        return 0
    sizes = sizes_for(args)
    scenarios = [s for s in args.only.split(",") if s]
    unknown = set(scenarios) - set(ALL_SCENARIOS)
    if unknown:
        raise SystemExit(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    python = args.python or str(ensure_peers_venv())
    _more_files()
    ensure_postgres()
    bench = Bench(args, python, sizes)
    bench.results["notes"].extend(args.note)
    command = "python bench/run.py" + "".join(
        f" {shlex.quote(a)}" for a in (argv if argv is not None else sys.argv[1:])
    )
    started = time.time()
    try:
        bench.probe()
        bench.results["meta"]["command"] = command
        bench.results["meta"]["scenarios"] = scenarios
        for scenario in ALL_SCENARIOS:
            if scenario in scenarios:
                log(f"== {scenario}")
                getattr(bench, scenario)()
    finally:
        bench.results.setdefault("meta", {})["seconds"] = time.time() - started
        path = bench.save()
        bench.close()
    log(f"raw results: {path}")
    if not args.no_report:
        report.write(bench.results, out, plot, python=python)
        log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
