"""`pip install denpyo` with no extras: the library on SQLite and the command line,
no database driver, HTTP client or web framework. The wheel is built from a copy of
this tree's sources and installed into a clean virtualenv, as a user would."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXTRAS_ONLY = (
    "psycopg",
    "pymysql",
    "aiohttp",
    "starlette",
    "jinja2",
    "uvicorn",
    "prometheus-client",
    "argon2-cffi",
    "aio-pika",
    "nats-py",
    "django",
)
# Under `pytest -n 2`, these tests stay on one worker (`--dist loadgroup`), which
# builds the wheel once for all of them.
pytestmark = pytest.mark.xdist_group("lean-install")


@pytest.fixture(scope="module")
def core_install(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("lean")
    wheels = where / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "-w",
            str(wheels),
            str(_sources(where / "tree")),
        ],
        check=True,
        cwd=where,
    )
    env = where / "venv"
    venv.create(env)  # without pip of its own (seconds saved): this pip installs into it
    [wheel] = wheels.glob("denpyo-*.whl")
    subprocess.run([*_pip(env), "install", "-q", str(wheel)], check=True)
    return env


def _sources(tree: Path) -> Path:
    """A copy of what the wheel is made of, in `tree`. pip builds in the folder it is
    given: setuptools writes its build/ and the egg-info there, so two builds of this
    tree at once (another test run in the same checkout, an editable install) tear
    each other's build/ apart, and a stale build/ from an earlier run can put files
    since removed into the wheel. A copy shares nothing and leaves this tree as it was."""
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    shutil.copytree(ROOT / "src", tree / "src", ignore=skip)
    for name in ("pyproject.toml", "README.md"):  # the project and its long description
        shutil.copy2(ROOT / name, tree / name)
    return tree


def _pip(env: Path) -> list[str | Path]:
    """The test's own pip, acting on the clean virtualenv."""
    return [sys.executable, "-m", "pip", "--python", env / "bin" / "python"]


def test_the_core_installs_nothing_of_the_extras(core_install: Path) -> None:
    listed = subprocess.run(
        [*_pip(core_install), "list", "--format", "json"],
        check=True,
        capture_output=True,
        text=True,
    )
    installed = {package["name"].lower() for package in json.loads(listed.stdout)}
    assert "denpyo" in installed and "click" in installed
    assert not installed & set(EXTRAS_ONLY), installed & set(EXTRAS_ONLY)


def test_the_core_submits_on_sqlite(core_install: Path, tmp_path: Path) -> None:
    script = """
import denpyo
with denpyo.Ledger("sqlite:///core.db") as ledger:
    ledger.migrate()
    ledger.channel("email")(lambda sub: "msg-" + sub.key)
    sub = ledger.submit("email", "order:1", {"to": "a@example.com"})
    print(sub.status.value, sub.remote_id)
"""
    done = subprocess.run(
        [core_install / "bin" / "python", "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["synced", "msg-order:1"]
    status = subprocess.run(
        [core_install / "bin" / "denpyo", "--db", "sqlite:///core.db", "status", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["totals"]["synced"] == 1


def test_the_demo_runs_from_the_core(core_install: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [core_install / "bin" / "denpyo", "demo", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    story = json.loads(done.stdout)
    assert story["denpyo_synced"] == story["provider_denpyo"] == story["orders"]
    assert story["provider_denpyo_duplicates"] == 0 and story["duplicates_after_resend"] > 0


def test_a_part_without_its_extra_names_it(core_install: Path) -> None:
    done = subprocess.run(
        [
            core_install / "bin" / "python",
            "-c",
            "import denpyo\n"
            "try:\n    denpyo.Ledger('postgresql://u@127.0.0.1/db')\n"
            "except denpyo.ConfigurationError as exc:\n    print(exc)",
        ],
        capture_output=True,
        text=True,
    )
    assert "pip install 'denpyo[postgresql]'" in done.stdout, done.stderr


def test_the_webhooks_without_their_extra_name_it(core_install: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [
            core_install / "bin" / "denpyo",
            "--db",
            f"sqlite:///{tmp_path}/lean.db",
            "webhooks",
            "--stripe-secret",
            "whsec_x",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "pip install 'denpyo[webhooks]'" in done.stderr, done.stderr
