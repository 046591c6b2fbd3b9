"""The install lines of the README, which the home page includes, run as written in
a copy of the source tree: from the checkout (an editable install), and the wheel
that `make dist` builds there, each with the HTTP channel. A copy, because pip
builds in the folder it is given (see test_lean_install.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from doc_pages import named, read

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.xdist_group("install")


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """What a checkout holds of the package: its sources, project, README, Makefile."""
    tree = tmp_path / "denpyo"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    shutil.copytree(ROOT / "src", tree / "src", ignore=skip)
    for name in ("pyproject.toml", "README.md", "Makefile"):
        shutil.copy2(ROOT / name, tree / name)
    return tree


def _bash(code: str, cwd: Path, path: list[Path]) -> str:
    """Run a page's block in bash, `path` first on PATH; what it printed."""
    env = {**os.environ, "PATH": os.pathsep.join([*map(str, path), os.environ["PATH"]])}
    env.pop("VIRTUAL_ENV", None)
    done = subprocess.run(
        ["bash", "-euc", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, (code, done.stdout[-3000:], done.stderr[-3000:])
    return done.stdout + done.stderr


def _works(env: Path) -> None:
    """The command line answers, and the HTTP channel imports (aiohttp came with it)."""
    version = subprocess.run(
        [env / "bin" / "denpyo", "--version"], capture_output=True, text=True, check=True
    )
    assert version.stdout.startswith("denpyo, version "), version.stdout
    subprocess.run([env / "bin" / "python", "-c", "import denpyo.channels.http"], check=True)


def test_the_home_page_shows_the_readme_s_install_lines() -> None:
    assert '--8<-- "README.md:install"' in read("index.md")
    assert "published on PyPI" in (ROOT / "README.md").read_text()


def test_the_checkout_line_installs_denpyo_with_its_http_channel(checkout: Path) -> None:
    code = named("../README.md", "install")["checkout"]
    # python3 is this interpreter, as a reader's PATH finds one
    _bash(code, checkout, [Path(sys.executable).parent])
    _works(checkout / ".venv")


def test_the_wheel_make_dist_builds_installs_with_its_http_channel(
    checkout: Path, tmp_path: Path
) -> None:
    code = named("../README.md", "install")["wheel"]
    app = tmp_path / "app-venv"
    venv.create(app, with_pip=True)  # the reader's own virtualenv, activated
    said = _bash(code, checkout, [app / "bin"])
    [wheel] = (checkout / "dist").glob("denpyo-*.whl")
    assert wheel.name in code, (wheel.name, said[-2000:])
    assert not (checkout / "build").exists()
    _works(app)
