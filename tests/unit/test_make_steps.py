"""`make test`'s steps (scripts/steps.sh) and the busy machine it must pass on
(scripts/busy.sh): every step runs even when one before it failed, the summary
names each, and the exit status says whether any failed."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _fake_make(tmp_path: Path, failing: set[str]) -> Path:
    """A `make` that records each target it is asked for and fails those in `failing`."""
    make = tmp_path / "make"
    make.write_text(
        "#!/bin/sh\n"
        f'echo "$2" >> {tmp_path}/ran\n'
        f'case " {" ".join(sorted(failing))} " in *" $2 "*) exit 2 ;; esac\n'
    )
    make.chmod(0o755)
    return make


def test_every_step_runs_after_a_failure_and_the_summary_names_it(tmp_path: Path) -> None:
    make = _fake_make(tmp_path, {"test-main"})
    steps = ["test-main", "test-chaos", "test-partitioned"]
    done = subprocess.run(
        [ROOT / "scripts" / "steps.sh", make, *steps], capture_output=True, text=True
    )
    assert done.returncode != 0
    assert (tmp_path / "ran").read_text().split() == steps
    assert re.search(r"FAILED: test-main \(\d+m\d+s\)", done.stdout), done.stdout
    assert re.search(r"passed: test-chaos \(\d+m\d+s\)", done.stdout)
    assert re.search(r"passed: test-partitioned \(\d+m\d+s\)", done.stdout)


def test_all_steps_passing_exit_zero(tmp_path: Path) -> None:
    done = subprocess.run(
        [ROOT / "scripts" / "steps.sh", _fake_make(tmp_path, set()), "a", "b"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout
    assert "FAILED" not in done.stdout


def test_steps_joined_by_a_plus_run_together_each_judged_on_its_own(tmp_path: Path) -> None:
    make = _fake_make(tmp_path, {"b"})
    done = subprocess.run(
        [ROOT / "scripts" / "steps.sh", make, "a+b", "c"], capture_output=True, text=True
    )
    assert done.returncode != 0
    ran = (tmp_path / "ran").read_text().split()
    assert sorted(ran[:2]) == ["a", "b"] and ran[2:] == ["c"]  # c after both
    assert re.search(r"passed: a \(\d+m\d+s\)", done.stdout), done.stdout
    assert re.search(r"FAILED: b \(\d+m\d+s\)", done.stdout), done.stdout
    assert re.search(r"passed: c \(\d+m\d+s\)", done.stdout), done.stdout


def test_make_test_runs_its_steps_through_the_script() -> None:
    makefile = (ROOT / "Makefile").read_text()
    steps = re.search(r"^TEST_STEPS = ((?:.*\\\n)*.*)$", makefile, re.M)
    assert steps is not None
    for step in re.split(r"[\s\\+]+", steps.group(1).strip()):
        assert re.search(rf"^{step}:", makefile, re.M), step
    assert "scripts/steps.sh $(MAKE) $(TEST_STEPS)" in makefile


def test_busy_stops_its_burners_and_keeps_the_command_s_status(tmp_path: Path) -> None:
    done = subprocess.run(
        [ROOT / "scripts" / "busy.sh", "sh", "-c", "exit 3"], capture_output=True, text=True
    )
    assert done.returncode == 3
    pids = re.search(r"pids (\d+) (\d+)", done.stdout)
    assert pids is not None, done.stdout
    for pid in map(int, pids.groups()):
        assert not Path(f"/proc/{pid}").exists() or _zombie(pid), f"burner {pid} still runs"


def _zombie(pid: int) -> bool:
    try:
        return " Z " in Path(f"/proc/{pid}/stat").read_text().split(")", 1)[1][:4]
    except OSError:
        return True
