"""Every database defines the same named queries and the same migrations."""

import pytest

from denpyo.store.queries import DIALECTS, ddl, load_migrations, load_queries, split_statements


def test_every_dialect_defines_the_same_query_names() -> None:
    """The same names everywhere; PostgreSQL's one-statement fast paths and MariaDB's
    batch read-back are the only extras, and the queries PostgreSQL's make unnecessary
    the only ones it lacks; all are declared."""
    from denpyo.store.mysql import EXTRA_QUERIES as MYSQL_EXTRA
    from denpyo.store.postgresql import EXTRA_QUERIES, REPLACED_QUERIES

    none: frozenset[str] = frozenset()
    extras = {"sqlite": none, "postgresql": EXTRA_QUERIES, "mysql": MYSQL_EXTRA}
    replaced = {"sqlite": none, "postgresql": REPLACED_QUERIES, "mysql": none}
    names = {dialect: set(load_queries(dialect)) for dialect in DIALECTS if _present(dialect)}
    reference = names["sqlite"]
    for dialect, defined in names.items():
        expected = (reference - replaced[dialect]) | extras[dialect]
        assert defined == expected, (dialect, defined ^ expected)
        assert replaced[dialect] <= reference


def test_migrations_carry_the_same_numbers() -> None:
    numbers = {d: [v for v, _ in load_migrations(d)] for d in DIALECTS if load_migrations(d)}
    assert len(set(map(tuple, numbers.values()))) == 1, numbers


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_ddl_has_every_table_and_the_status_check(dialect: str) -> None:
    text = ddl(dialect)
    for needle in ("denpyo_submissions", "denpyo_events", "denpyo_schema_version",
                   "'requesting', 'synced', 'failed', 'rejected'"):  # fmt: skip
        assert needle in text


def test_split_statements_drops_comments() -> None:
    script = "-- a comment; with a semicolon\nCREATE TABLE a (x int);\n\n-- only\nSELECT 1;\n"
    assert split_statements(script) == ["CREATE TABLE a (x int)", "SELECT 1"]


def _present(dialect: str) -> bool:
    try:
        load_queries(dialect)
    except FileNotFoundError:
        return False
    return True


def test_shared_predicates_are_defined_once_per_database() -> None:
    """ "In doubt" and "needs a person" are fragments, the same names in every file,
    and no query spells them out by hand."""
    from importlib import resources

    from denpyo.store.queries import load_fragments

    for dialect in DIALECTS:
        text = resources.files("denpyo.store").joinpath("sql", f"{dialect}.sql").read_text()
        fragments = load_fragments(text)
        assert set(fragments) == {"in_doubt", "needs_a_person"}, dialect
        queries = load_queries(dialect)
        assert "{{" not in "".join(queries.values())
        assert "$." not in "".join(queries.values())
        outside = text.split("\n-- schema_version_create:", 1)[1]
        assert outside.count("error_kind = 'ambiguous')") == 0, dialect


def test_a_fragment_expands_with_or_without_an_alias() -> None:
    from denpyo.store.queries import expand

    fragments = {"late": "$.due < now()", "open": "{{late}} AND $.done IS NULL"}
    assert expand("WHERE {{late}}", fragments) == "WHERE (due < now())"
    assert expand("WHERE {{late s}}", fragments) == "WHERE (s.due < now())"
    assert expand("{{open s}}", fragments) == "((s.due < now()) AND s.done IS NULL)"
    with pytest.raises(ValueError, match="no fragment named gone"):
        expand("{{gone}}", fragments)
