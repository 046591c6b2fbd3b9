"""Every database a URL opens has a test record, so the suite runs on it."""

import pytest

from database_records import TEST_DATABASES, database_record
from denpyo.store.dialects import DATABASES, DIALECTS


def test_every_database_a_url_opens_has_a_test_record() -> None:
    missing = [name for name in DATABASES if name not in TEST_DATABASES]
    assert missing == [], f"no test record in tests/database_records.py for {missing}"


def test_each_test_record_is_a_dialects() -> None:
    for name, record in TEST_DATABASES.items():
        assert record.name == name and name in DIALECTS


def test_an_unknown_database_raises_rather_than_meaning_another() -> None:
    with pytest.raises(KeyError, match="no test record"):
        database_record("nosuchdb")
