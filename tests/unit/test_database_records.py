"""Every database a URL opens has a test record, so the suite runs on it."""

import pytest

from database_records import TEST_DATABASES, database_record
from denpyo.store.dialects import DATABASES, DIALECTS


def test_every_database_a_url_opens_has_a_test_record() -> None:
    """A variant a URL opens runs on its family's record, under its profile
    (`Database.profile`: DENPYO_TEST_POSTGRES_PROFILE)."""
    missing = [name for name, dialect in DATABASES.items() if dialect.family not in TEST_DATABASES]
    assert missing == [], f"no test record in tests/database_records.py for {missing}"
    for name, record in TEST_DATABASES.items():
        variants = [known.profile for known in DIALECTS.values() if known.parent == name]
        assert record.profile is None or record.profile in variants, name


def test_each_test_record_is_a_dialects() -> None:
    for name, record in TEST_DATABASES.items():
        assert record.name == name and name in DIALECTS


def test_an_unknown_database_raises_rather_than_meaning_another() -> None:
    with pytest.raises(KeyError, match="no test record"):
        database_record("nosuchdb")
