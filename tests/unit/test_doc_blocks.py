"""Every code block of the documentation either runs in a test, as printed, or says
to the reader why it does not: a block added to a page with neither fails here."""

from __future__ import annotations

import re

from doc_pages import DOCS, blocks

ROOT = DOCS.parent
CODE = {"python", "sh", "bash", "sql"}  # the others are output, layouts, figures
NOT_RUN = re.compile(r"^(?:#|--) Not run as printed: \S")  # the block's first line
TESTS = "\n".join(path.read_text() for path in sorted((ROOT / "tests").rglob("*.py")))
WHOLE_PAGES = {  # pages whose every block one test runs
    "tutorial/crash-recovered.md": "tests/acceptance/test_tutorial.py",
}


def _first_line(code: str) -> str:
    return next((line.strip() for line in code.splitlines() if line.strip()), "")


def _accounted(page: str, marker: str, code: str) -> bool:
    """True when a test runs the block, or the block says why none does."""
    if code.startswith("--8<--"):  # a file of the repository, which its own test runs
        return True
    if NOT_RUN.match(code):
        return True
    if page in WHOLE_PAGES:
        return page in (ROOT / WHOLE_PAGES[page]).read_text()
    return bool(marker) and f'"{page}"' in TESTS and f'"{marker}"' in TESTS


def _unaccounted() -> set[tuple[str, str]]:
    found = set()
    for path in sorted(DOCS.rglob("*.md")):
        page = str(path.relative_to(DOCS))
        for block in blocks(page):
            if block.language in CODE and not _accounted(page, block.marker, block.code):
                found.add((page, _first_line(block.code)))
    return found


def test_every_code_block_runs_in_a_test_or_says_why_not() -> None:
    """A block runs in a test when it is marked `<!-- marker: name -->` on its page
    and a test reads that page and marker, or it is a file of the repository
    (`--8<--`) that its own test runs; else it starts with "# Not run as printed: why"."""
    unaccounted = sorted(_unaccounted())
    assert not unaccounted, "blocks no test runs and that do not say why:\n" + "\n".join(
        map(str, unaccounted)
    )


def test_a_block_marked_not_run_says_why_to_the_reader() -> None:
    """The reason is in the block's text, which the site shows."""
    assert NOT_RUN.match("# Not run as printed: it needs a provider's real key")
    assert not NOT_RUN.match("# Not run as printed:")
