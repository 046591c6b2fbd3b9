"""The documentation site shows what the package holds: every migration and query
file, every command of the command line and each of its options."""

import re
from collections.abc import Iterator
from pathlib import Path

import click

from denpyo.cli import main
from denpyo.store.dialects import DATABASES, DIALECTS

ROOT = Path(__file__).resolve().parents[2]


def test_the_sql_reference_includes_every_migration_and_query_file() -> None:
    page = (ROOT / "docs" / "reference" / "sql.md").read_text()
    for known in DIALECTS.values():
        # a variant's files are overlays named after its parent (store/dialects.py)
        dialect = f"{known.parent}-{known.name}" if known.parent else known.name
        assert f'--8<-- "src/denpyo/store/sql/{dialect}.sql"' in page
        for migration in sorted((ROOT / "src/denpyo/store/migrations" / dialect).glob("*.sql")):
            assert f'--8<-- "{migration.relative_to(ROOT)}"' in page, migration.name


def _commands(
    command: click.Command, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, click.Command]]:
    """Every command of the command line, by its words after `denpyo`, groups first."""
    yield " ".join(path), command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _commands(sub, (*path, name))


def test_every_command_and_option_of_the_command_line_is_documented() -> None:
    """Each command has a row in the guide's table, and each of its options is named
    in that row or in the page's text (the filters, `--json`, `--by`, the global
    options): a command or an option added without a word in the guide fails here."""
    page = (ROOT / "docs" / "guide" / "cli.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    prose = "\n".join(line for line in page.splitlines() if not line.startswith("|"))
    for name, command in _commands(main):
        words = f"denpyo {name}".rstrip()
        own = [row for row in rows if re.match(rf"\| `{re.escape(name)}\b(?![\w-])", row)]
        if name:
            assert own, f"`{words}` has no row in docs/guide/cli.md"
        said = "\n".join([*own, prose])
        for param in command.params:
            if not isinstance(param, click.Option):
                continue
            for option in [*param.opts, *param.secondary_opts]:
                if option.startswith("--"):
                    named = re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", said)
                    assert named, f"`{words} {option}` is not in docs/guide/cli.md"


def test_the_upgrade_page_names_every_migration() -> None:
    """Each migration a database has is a row of docs/how-to/upgrading.md (`0002
    claim indexes`), so that a new one comes with what it does to a big table."""
    page = (ROOT / "docs" / "how-to" / "upgrading.md").read_text()
    for dialect in DATABASES:
        for migration in (ROOT / "src/denpyo/store/migrations" / dialect).glob("*.sql"):
            number, _, name = migration.stem.partition("_")
            assert f"| {number} {name.replace('_', ' ')} |" in page, migration


def test_no_page_says_plain_status_exits_1() -> None:
    """Only `status --check` exits 1 when a person is needed: a health check copied
    from a page that says `denpyo status` does would never fire."""
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for line in page.read_text().splitlines():
            if re.search(r"\bstatus\b(?! --check).*exits? 1|exits? 1.*`denpyo status`", line):
                raise AssertionError(f"{page.relative_to(ROOT)}: {line.strip()}")


def test_every_page_is_in_the_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text().split("\nnav:\n", 1)[1]
    for page in sorted((ROOT / "docs").rglob("*.md")):
        assert f": {page.relative_to(ROOT / 'docs')}\n" in nav, f"{page} is in no menu"


def test_the_connection_limits_are_the_ones_documented() -> None:
    from denpyo.domain.limits import IDLE_CONNECTION_SECONDS, MAX_IDLE_CONNECTIONS, SERVE_THREADS

    for page in ("guide/metrics.md", "guide/dashboard.md"):
        text = " ".join((ROOT / "docs" / page).read_text().split())
        assert f"nothing for {IDLE_CONNECTION_SECONDS:g} seconds" in text, page
        assert f"at most {MAX_IDLE_CONNECTIONS} wait" in text, page
    metrics = " ".join((ROOT / "docs/guide/metrics.md").read_text().split())
    assert f"answers on {SERVE_THREADS} threads" in metrics
