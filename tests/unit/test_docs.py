"""The documentation site shows what the package holds."""

from pathlib import Path

from denpyo.store.queries import DIALECTS

ROOT = Path(__file__).resolve().parents[2]


def test_the_sql_reference_includes_every_migration_and_query_file() -> None:
    page = (ROOT / "docs" / "reference" / "sql.md").read_text()
    for dialect in DIALECTS:
        assert f'--8<-- "src/denpyo/store/sql/{dialect}.sql"' in page
        for migration in sorted((ROOT / "src/denpyo/store/migrations" / dialect).glob("*.sql")):
            assert f'--8<-- "{migration.relative_to(ROOT)}"' in page, migration.name
