"""The shared store suite (tests/integration/store, run on SQLite, PostgreSQL and
MariaDB, and again on PostgreSQL's partitioned layout and under SERIALIZABLE) calls
every method of the store's interface: a method added without a test there fails
here, named.

The interface is what `Store` declares (store/base.py: "every operation, in one
place"), as the classes that implement it have it, and any other public method of
theirs that code outside denpyo.store calls. Their remaining public methods are the
plumbing the store's own modules share (a statement inside the caller's transaction,
`*_in`; rows to objects; values to parameters; the executors): each interface method
that uses them is the test of them."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from denpyo.store.base import Store
from denpyo.store.dialects import DIALECTS
from denpyo.store.sql_store import SqlStore

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "tests" / "integration" / "store"
PACKAGE = ROOT / "src" / "denpyo"

NOT_THE_INTERFACE: dict[str, str] = {}
"""Public methods the engine calls that are no operation on the ledger (none now):
name -> why no store test calls it."""


def store_classes() -> list[type]:
    return [Store, SqlStore, *(dialect.store_class() for dialect in DIALECTS.values())]


def public_methods(cls: type) -> dict[str, str]:
    """The public callables a store class has from denpyo.store: name -> the class
    that defines it."""
    found = {}
    for name in dir(cls):
        if name.startswith("_"):
            continue
        owner = next(k for k in cls.__mro__ if name in vars(k))
        if not owner.__module__.startswith("denpyo.store"):
            continue
        attr = inspect.getattr_static(cls, name)
        if isinstance(attr, classmethod | staticmethod):
            attr = attr.__func__
        if callable(attr) and not isinstance(attr, type):
            found[name] = f"{owner.__module__}.{owner.__qualname__}"
    return found


def names_used(files: list[Path], *, called: bool = False) -> set[str]:
    """Every attribute these files name (`store.claim(...)`, or `store.record` passed
    to be called); `called`: only those called there."""
    found = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if called and isinstance(node, ast.Call):
                node = node.func
            elif called:
                continue
            if isinstance(node, ast.Attribute):
                found.add(node.attr)
    return found


def interface() -> dict[str, str]:
    methods: dict[str, str] = {}
    for cls in store_classes():
        methods.update(public_methods(cls))
    declared = set(public_methods(Store))
    outside = [p for p in PACKAGE.rglob("*.py") if PACKAGE / "store" not in p.parents]
    used_outside = names_used(outside, called=True)
    return {
        name: owner
        for name, owner in methods.items()
        if (name in declared or name in used_outside) and name not in NOT_THE_INTERFACE
    }


def test_every_store_method_is_called_by_the_store_suite() -> None:
    called = names_used([*sorted(SUITE.glob("test_*.py")), SUITE / "store_helpers.py"])
    missing = sorted(
        f"{name} ({owner})" for name, owner in interface().items() if name not in called
    )
    assert not missing, (
        "no test in tests/integration/store calls these store methods; add one to the "
        "file of their group (test_store_<group>.py):\n  " + "\n  ".join(missing)
    )


def test_the_interface_is_found_and_the_exceptions_are_real() -> None:
    found = interface()
    assert {"record", "claim_ready", "move", "add_action", "pause_channel"} <= set(found)
    assert {"drop_partition", "forget_rows", "reseal"} <= set(found)
    assert "record_in" not in found, "a statement inside the caller's transaction: plumbing"
    every = {name for cls in store_classes() for name in public_methods(cls)}
    assert set(NOT_THE_INTERFACE) <= every, "an exception for a method that is gone"
