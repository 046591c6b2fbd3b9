"""The limits reference (docs/reference/limits.md) reads its numbers from the code:
each row's first number in bold is the value of the constant its last column names,
and every limit of domain/limits.py is on the page, so that the page cannot drift."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from pathlib import Path

from denpyo.domain import limits
from denpyo.domain.filters import MAX_ERROR_TEXT, MAX_LIMIT, Filter
from denpyo.domain.forgetting import Where
from denpyo.engine.acting import check_note
from denpyo.engine.operator import MAX_NOTE_LENGTH
from denpyo.engine.people import MAX_NAME, check_name

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


def refusal(call: Callable[[], object]) -> str:
    try:
        call()
    except Exception as exc:  # each check raises its own kind
        return str(exc)
    raise AssertionError("not refused")


def test_the_errors_on_the_page_are_the_code_s() -> None:
    """Each refusal the page quotes, as the code words it (the part that names what
    was typed shown as `…` on the page)."""
    page = PAGE.read_text()
    deep: list[object] = []
    for _ in range(limits.MAX_PAYLOAD_DEPTH):
        deep = [deep]
    said = {
        refusal(lambda: limits.encode_payload("x" * (limits.MAX_PAYLOAD_BYTES - 1))),
        refusal(lambda: limits.encode_payload(deep)),
        refusal(lambda: limits.check_key("k" * (limits.MAX_KEY_LENGTH + 1))),
        refusal(lambda: check_note("n" * (MAX_NOTE_LENGTH + 1), "x")),
        refusal(lambda: Filter(limit=MAX_LIMIT + 1)),
        refusal(lambda: Filter(error_text="e" * (MAX_ERROR_TEXT + 1))),
        refusal(lambda: check_name("p" * (MAX_NAME + 1))),
        refusal(lambda: limits.check_channel_name("-bad")).replace("'-bad'", "'…'"),
        refusal(lambda: Where.parse("a b=x")).replace("'a b'", "'…'"),
    }
    for text in said:
        assert f"`{text}`" in page, text
