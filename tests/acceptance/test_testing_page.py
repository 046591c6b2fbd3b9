"""The "testing your app" page (docs/how-to/testing.md) as a reader uses it: its
conftest.py and its test file written out in a fresh folder and run by pytest, in a
process of its own; every test of the page passes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from doc_pages import named


def test_the_testing_page_s_tests_pass_as_written(tmp_path: Path) -> None:
    files = named("how-to/testing.md", "testing")
    assert set(files) == {"conftest", "tests"}, files
    for code in files.values():
        name = re.match(r"# (\S+\.py)\n", code)
        assert name is not None, code
        (tmp_path / name.group(1)).write_text(code)
    tests = len(re.findall(r"^def test_", files["tests"], re.M))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error", "."],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert f"{tests} passed" in done.stdout, done.stdout[-2000:]
