"""The limits reference (docs/reference/limits.md) reads its numbers from the code:
each row's first number in bold is the value of the constant its last column names,
and every limit of domain/limits.py is on the page, so that the page cannot drift."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from denpyo.domain import limits

PAGE = Path(__file__).resolve().parents[2] / "docs/reference/limits.md"
ROW = re.compile(r"^\|(.+)\| `(denpyo(?:\.\w+)+)\.(\w+)` \|$", re.M)


def quoted() -> list[tuple[str, str, int]]:
    """(module, constant, the number the page prints) for each row of a table."""
    found = []
    for cells, module, name in ROW.findall(PAGE.read_text()):
        number = re.search(r"\*\*([\d,]+)\*\*", cells)
        assert number is not None, f"no number in bold for {module}.{name}"
        found.append((module, name, int(number.group(1).replace(",", ""))))
    return found


def test_every_number_on_the_page_is_the_code_s() -> None:
    rows = quoted()
    assert len(rows) >= 20, rows
    for module, name, number in rows:
        value = getattr(importlib.import_module(module), name)
        assert number == value, f"{module}.{name} is {value}; the page says {number}"


def test_every_limit_of_the_input_checks_is_on_the_page() -> None:
    named = {(module, name) for module, name, _ in quoted()}
    for name in dir(limits):
        if name.startswith("MAX_"):
            assert ("denpyo.domain.limits", name) in named, f"{name} is not on the page"
