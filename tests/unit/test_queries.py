"""Every database defines the same named queries and the same migrations."""

import pytest

from denpyo.store.dialects import DATABASES, DIALECTS
from denpyo.store.queries import ddl, load_migrations, load_queries, split_statements


def test_each_query_file_defines_exactly_the_queries_its_store_runs() -> None:
    """Each layer of a store lists the named queries it runs (`QUERIES`): a database's
    file defines their union, no more and no less."""
    for store in (dialect.store_class() for dialect in DIALECTS.values()):
        runs: set[str] = set()
        for layer in store.__mro__:
            runs |= vars(layer).get("QUERIES", frozenset())
        defined = set(load_queries(store.dialect))
        assert defined == runs, (store.dialect, defined ^ runs)


def test_the_partitioned_layout_replaces_queries_and_adds_only_its_own() -> None:
    """PostgreSQL's partitioned layout (sql/postgresql-partitioned.sql) redefines some of
    the dialect's queries and defines those only it runs (`LAYOUT_QUERIES`)."""
    from denpyo.store.postgresql import PostgresStore
    from denpyo.store.queries import load_layout_queries

    own = set(load_layout_queries("postgresql", "partitioned"))
    plain = set(load_queries("postgresql"))
    assert own - plain == PostgresStore.LAYOUT_QUERIES
    assert own & plain == {
        "submission_record", "submission_record_many", "submission_get_existing",
        "submission_get_by_key", "submission_get_recorded_before", "key_get_recorded_before",
        "submission_remove", "key_expire", "event_list_many",
    }  # fmt: skip
    merged = load_queries("postgresql", "partitioned")
    assert set(merged) == plain | own
    assert "{{" not in "".join(merged.values()) and "$." not in "".join(merged.values())


def test_migrations_carry_the_same_numbers() -> None:
    numbers = {d: [v for v, _ in load_migrations(d)] for d in DATABASES if load_migrations(d)}
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


def test_shared_predicates_are_defined_once_per_database() -> None:
    """ "In doubt", "needs a person" and an operator's filter are fragments, the same
    names in every file, and no query spells them out by hand."""
    from importlib import resources

    from denpyo.store.queries import load_fragments

    for dialect in DATABASES:
        text = resources.files("denpyo.store").joinpath("sql", f"{dialect}.sql").read_text()
        fragments = load_fragments(text)
        shared = {"in_doubt", "needs_a_person", "list_filter", "removable"}
        index_predicates = {"ready_index", "in_doubt_index", "attention_index"}
        assert shared <= set(fragments) <= shared | index_predicates, dialect
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
