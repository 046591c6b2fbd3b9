"""Every database defines the same named queries and the same migrations."""

import pytest

from denpyo.store.dialects import BY_SCHEME, DATABASES, DIALECTS
from denpyo.store.queries import (
    ddl,
    load_migrations,
    load_overlay_queries,
    load_queries,
    split_statements,
)


def test_each_query_file_defines_exactly_the_queries_its_store_runs() -> None:
    """Each layer of a store lists the named queries it runs (`QUERIES`): a database's
    file defines their union, no more and no less."""
    for dialect in DATABASES.values():
        store = dialect.store_class()
        runs: set[str] = set()
        for layer in store.__mro__:
            runs |= vars(layer).get("QUERIES", frozenset())
        defined = set(load_queries(store.dialect))
        assert defined == runs, (store.dialect, defined ^ runs)


def test_every_record_loads_its_queries_and_migrations() -> None:
    """Each record, variants included, has its whole query set (fragments expanded)
    and a migration for every number up to the latest."""
    for name, dialect in DIALECTS.items():
        queries = load_queries(name)
        assert "create_schema_version" in queries, name
        assert "{{" not in "".join(queries.values()), name
        assert "$." not in "".join(queries.values()), name
        numbers = [version for version, _ in load_migrations(name)]
        first = numbers[0]
        assert numbers == list(range(first, first + len(numbers))), name
        assert first == 1 or dialect.squashed, name


def test_an_overlay_replaces_only_its_parents_queries_and_adds_only_its_stores() -> None:
    """A variant's overlay (sql/<variant>.sql) redefines queries its parent has, and
    adds only those its store runs beyond the parent's (`QUERIES` of its own layers,
    or `LAYOUT_QUERIES` for a layout)."""
    variants = [dialect for dialect in DIALECTS.values() if dialect.parent is not None]
    assert variants
    for dialect in variants:
        assert dialect.parent is not None
        own = set(load_overlay_queries(dialect.name))
        parent = set(load_queries(dialect.parent))
        store = dialect.store_class()
        declared: set[str] = set(getattr(store, "LAYOUT_QUERIES", frozenset()))
        if store.dialect == dialect.name:  # its own store class: its own layers' queries
            for layer in store.__mro__:
                declared |= vars(layer).get("QUERIES", frozenset())
        assert own - parent <= declared, (dialect.name, own - parent - declared)
        assert set(load_queries(dialect.name)) == parent | own


def test_the_partitioned_layout_replaces_queries_and_adds_only_its_own() -> None:
    """PostgreSQL's partitioned layout (sql/postgresql-partitioned.sql) redefines some of
    the dialect's queries and defines those only it runs (`LAYOUT_QUERIES`)."""
    from denpyo.store.postgresql import PostgresStore

    own = set(load_overlay_queries("postgresql-partitioned"))
    plain = set(load_queries("postgresql"))
    assert own - plain == PostgresStore.LAYOUT_QUERIES
    assert own & plain == {
        "record_submission",
        "record_submissions_many",
        "get_submission_existing",
        "get_submission_by_key",
        "get_submissions_recorded_before",
        "get_keys_recorded_before",
        "remove_submissions",
        "expire_keys",
        "list_events_many",
    }
    merged = load_queries("postgresql-partitioned")
    assert set(merged) == plain | own
    assert "{{" not in "".join(merged.values()) and "$." not in "".join(merged.values())


def test_the_partitioned_layout_writes_a_removed_keys_outcome_once() -> None:
    """The UPDATE that gives denpyo_keys the outcome of rows leaving (deleted one by one,
    or a dropped partition) is one fragment, which both queries include."""
    from importlib import resources

    text = resources.files("denpyo.store").joinpath("sql", "postgresql-partitioned.sql")
    assert text.read_text().count("UPDATE denpyo_keys k SET") == 1
    merged = load_queries("postgresql-partitioned")
    for name in ("remove_submissions", "remember_partition_keys"):
        assert "UPDATE denpyo_keys k SET" in merged[name], name


def test_a_variant_resolves_to_its_record_and_its_parents_schemes_stay() -> None:
    """A record with a parent is found by its own schemes only (a layout has none);
    the parent's schemes still open the parent; its family is the parent's."""
    for dialect in DIALECTS.values():
        for scheme in dialect.schemes:
            assert BY_SCHEME[scheme] is dialect
        if dialect.parent is not None:
            assert dialect.family == DIALECTS[dialect.parent].family
            assert not set(dialect.schemes) & set(DIALECTS[dialect.parent].schemes)
            assert dialect.executors == () and dialect.django_engines == ()
    assert DIALECTS["postgresql-partitioned"].schemes == ()
    assert set(DATABASES) == {name for name, d in DIALECTS.items() if d.schemes}


def test_a_variant_inherits_and_overrides_migrations(monkeypatch: pytest.MonkeyPatch) -> None:
    """A variant's migrations are its parent's, its own replacing the same number; a
    squashed one's first script replaces all of the parent's up to it."""
    from dataclasses import replace

    from denpyo.store import dialects, queries

    plain = dict(load_migrations("postgresql"))
    partitioned = dict(load_migrations("postgresql-partitioned"))
    assert min(partitioned) == 10 and partitioned[10] != plain[10]
    assert all(partitioned[version] == plain[version] for version in partitioned if version > 10)
    unsquashed = replace(dialects.POSTGRESQL_PARTITIONED, name="unsquashed", squashed=False)
    monkeypatch.setitem(dialects.DIALECTS, "unsquashed", unsquashed)
    real = queries._own_migrations
    monkeypatch.setattr(
        queries,
        "_own_migrations",
        lambda name: {10: "-- own"} if name == "unsquashed" else real(name),
    )
    merged = dict(queries.load_migrations.__wrapped__("unsquashed"))
    assert set(merged) == set(plain) and merged[10] == "-- own" and merged[3] == plain[3]


def test_migrations_carry_the_same_numbers() -> None:
    numbers = {d: [v for v, _ in load_migrations(d)] for d in DATABASES if load_migrations(d)}
    assert len(set(map(tuple, numbers.values()))) == 1, numbers


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_ddl_has_every_table_and_the_status_check(dialect: str) -> None:
    text = ddl(dialect)
    for needle in (
        "denpyo_submissions",
        "denpyo_events",
        "denpyo_schema_version",
        "'requesting', 'synced', 'failed', 'rejected'",
    ):
        assert needle in text


def test_split_statements_drops_comments() -> None:
    script = "-- a comment; with a semicolon\nCREATE TABLE a (x int);\n\n-- only\nSELECT 1;\n"
    assert split_statements(script) == ["CREATE TABLE a (x int)", "SELECT 1"]


def test_shared_predicates_are_defined_once_per_database() -> None:
    """ "In doubt", "needs a person" and an operator's filter are fragments, the same
    names in every file, and no query spells them out by hand."""
    from importlib import resources

    from denpyo.store.queries import load_fragments

    for dialect, record in DATABASES.items():
        if record.parent is not None:  # a variant's overlay uses its parent's fragments
            continue
        text = resources.files("denpyo.store").joinpath("sql", f"{dialect}.sql").read_text()
        fragments = load_fragments(text)
        shared = {"in_doubt", "needs_person", "list_filter", "removable"}
        index_predicates = {"ready_index", "in_doubt_index", "attention_index"}
        assert shared <= set(fragments) <= shared | index_predicates, dialect
        queries = load_queries(dialect)
        assert "{{" not in "".join(queries.values())
        assert "$." not in "".join(queries.values())
        outside = text.split("\n-- create_schema_version:", 1)[1]
        assert outside.count("error_kind = 'ambiguous')") == 0, dialect


def test_a_fragment_expands_with_or_without_an_alias() -> None:
    from denpyo.store.queries import expand

    fragments = {"late": "$.due < now()", "open": "{{late}} AND $.done IS NULL"}
    assert expand("WHERE {{late}}", fragments) == "WHERE (due < now())"
    assert expand("WHERE {{late s}}", fragments) == "WHERE (s.due < now())"
    assert expand("{{open s}}", fragments) == "((s.due < now()) AND s.done IS NULL)"
    with pytest.raises(ValueError, match="no fragment named gone"):
        expand("{{gone}}", fragments)
