"""The code of the documentation pages, read from them, so that the tests run what a
reader copies. A block that a test picks by name is marked on its page by an HTML
comment just above it, which the site does not show: `<!-- recipe: payment -->`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

DOCS = Path(__file__).resolve().parents[1] / "docs"
FENCED = re.compile(r"(?:<!-- (\w+): ([\w-]+) -->\s*)?^```(\w*)\n(.*?)^```", re.DOTALL | re.M)


class Block(NamedTuple):
    marker: str  # "recipe" for `<!-- recipe: payment -->`; "" when unmarked
    name: str  # "payment"
    language: str  # "python", "sql", "sh"
    code: str


def blocks(page: str, marker: str | None = None) -> list[Block]:
    """The fenced code blocks of docs/`page`, in page order; with `marker`, only
    those marked `<!-- marker: name -->`."""
    found = [Block(m or "", n or "", lang, code) for m, n, lang, code in FENCED.findall(read(page))]
    return found if marker is None else [b for b in found if b.marker == marker]


def named(page: str, marker: str) -> dict[str, str]:
    """The code of each block marked `<!-- marker: name -->`, by name."""
    return {block.name: block.code for block in blocks(page, marker)}


def read(page: str) -> str:
    return (DOCS / page).read_text()
