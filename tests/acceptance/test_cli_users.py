"""`denpyo users`, each command in a subprocess as a person runs it: the token printed
once and kept nowhere, the list without hashes, the file named by --file or
DENPYO_USERS, and bad input refused in one line (exit 2) with nothing written. No
database is needed, nor made."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from denpyo.engine import people


def users(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    outside = {k: v for k, v in os.environ.items() if k != "DENPYO_USERS"}
    full_env = {**outside, "COLUMNS": "200", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "denpyo.cli", "users", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=cwd,
        timeout=120,
    )


def test_add_prints_the_token_once_and_list_shows_no_hash(tmp_path: Path) -> None:
    path = tmp_path / "users.json"
    added = users("add", "alice", "--role", "operator", "--file", str(path), cwd=tmp_path)
    assert added.returncode == 0, added.stderr
    [token] = [w for w in added.stdout.split() if w.startswith("dpy_")]
    assert (added.stdout + added.stderr).count(token) == 1
    assert "shown only once" in added.stdout
    assert token not in path.read_text() and stat.S_IMODE(path.stat().st_mode) == 0o600
    directory = people.Directory(path)
    found = directory.verify(token)
    assert found is not None and found.name == "alice"

    env = {"DENPYO_USERS": str(path)}
    listed, as_json = (
        users("list", cwd=tmp_path, env=env),
        users("list", "--json", cwd=tmp_path, env=env),
    )
    assert listed.returncode == 0, listed.stderr
    assert "alice" in listed.stdout and "operator" in listed.stdout
    assert "$argon2" not in listed.stdout + as_json.stdout and token not in listed.stdout
    [row] = json.loads(as_json.stdout)
    assert (row["name"], row["role"], row["token"]) == ("alice", "operator", True)
    assert set(row) == {"id", "name", "role", "added", "token"}

    role = users("role", "ALICE", "approver", cwd=tmp_path, env=env)
    assert role.returncode == 0 and "now approver (was operator)" in role.stdout
    reset = users("reset", "alice", cwd=tmp_path, env=env)
    [new] = [w for w in reset.stdout.split() if w.startswith("dpy_")]
    assert new != token and "shown only once" in reset.stdout
    assert directory.verify(token) is None and directory.verify(new) is not None
    removed = users("remove", "alice", cwd=tmp_path, env=env)
    assert removed.returncode == 0 and "alice removed" in removed.stdout
    assert json.loads(users("list", "--json", cwd=tmp_path, env=env).stdout) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["users.json"]  # no database made


def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "users.json"
    people.add(path, "alice", "operator")
    before = path.read_bytes()
    file = ["--file", str(path)]
    cases = [
        (["add", "bob", "--role", "boss", *file], "no role named 'boss'"),
        (["add", "Alice", "--role", "viewer", *file], "already in"),
        (["add", "", "--role", "viewer", *file], "cannot be empty"),
        (["add", "eve\x07", "--role", "viewer", *file], "control characters"),
        (["remove", "nobody", *file], "no one named 'nobody'"),
        (["role", "alice", "root", *file], "no role named 'root'"),
        (["reset", "nobody", *file], "no one named"),
        (["list"], "give --file PATH or set DENPYO_USERS"),
        (["list", "--file", str(tmp_path / "missing.json")], "no users file at"),
        (["add", "bob", *file], "Missing option '--role'"),
    ]
    with ThreadPoolExecutor(2) as pool:
        done = list(pool.map(lambda case: users(*case[0], cwd=tmp_path), cases))
    for (args, message), proc in zip(cases, done, strict=True):
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.startswith("error: ") and message in proc.stderr, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert proc.stdout == "", args
    assert path.read_bytes() == before
    assert not (tmp_path / "missing.json").exists()
