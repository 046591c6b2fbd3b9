"""A database URL denpyo cannot read is refused when the ledger is made: one
`InvalidDatabaseURL`, never a driver's traceback, and never its password, not
even inside the driver's own reason."""

from __future__ import annotations

import pytest

import denpyo
from denpyo.errors import InvalidDatabaseURL
from denpyo.store import masked, shown_url


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("postgresql://u:SecretPw@127.0.0.1:99999/x", "malformed port"),
        ("postgresql://u:SecretPw@127.0.0.1:abc/x", "malformed port"),
        ("mysql://u:SecretPw@127.0.0.1:99999/x", "malformed port"),
        ("mysql://u:SecretPw@127.0.0.1:abc/x", "malformed port"),
        ("postgresql://u:Secret%ZZPw@127.0.0.1/x", "invalid percent-encoded token"),
        ("postgresql://u:SecretPw@[::1/x", "Invalid IPv6 URL"),
        ("postgresql://[::1", "Invalid IPv6 URL"),
        ("mysql://u:SecretPw@127.0.0.1/x?charset=%ZZ", "unknown charset"),
        ("postgresq://u:SecretPw@127.0.0.1/x", "unsupported database"),
        ("mysql://u:SecretPw@127.0.0.1/", "names no database"),
        ("postgresql://u:SecretPw@h1:5432,h2:abc/x", "malformed port"),
        ("mysql://u:SecretPw@h1,h2/x", "several hosts are for PostgreSQL only"),
    ],
)
def test_a_url_it_cannot_read_is_one_error_without_its_password(url: str, reason: str) -> None:
    with pytest.raises(InvalidDatabaseURL) as caught:
        denpyo.Ledger(url)
    message = str(caught.value)
    assert reason in message and "\n" not in message
    assert "Secret" not in message


def test_masked_hides_the_password_as_written_and_as_decoded() -> None:
    url = "postgresql://u:p%40ss%ZZ@h/x"
    assert masked('token: "p%40ss%ZZ"', url) == 'token: "***"'
    assert masked("p@ss%ZZ", url) == "***"
    assert masked("nothing of it", "postgresql://u@h/x") == "nothing of it"
    assert shown_url("postgresql://u:pw@h:99999/x") == "postgresql://u:***@h:99999/x"


def test_a_postgresql_url_may_name_several_hosts_for_a_failover() -> None:
    """libpq tries the hosts in turn and keeps the one that takes writes: a client
    that follows a promoted standby (nothing connects until the ledger is used)."""
    url = "postgresql://u:SecretPw@h1:5432,h2:5433/x?target_session_attrs=read-write"
    ledger = denpyo.Ledger(url)
    try:
        assert ledger.store.dialect == "postgresql"
        assert "Secret" not in shown_url(url)
    finally:
        ledger.close()


SECRET_FORMS = [
    ("postgresql://u:S3cretQ@127.0.0.1:5432/x", "S3cretQ"),
    ("postgresql://127.0.0.1:5432/x?user=postgres&password=S3cretQ", "S3cretQ"),
    ("postgresql://127.0.0.1:5432/x?password=S3cretQ&user=postgres", "S3cretQ"),
    ("postgresql://u@h1:5432,h2:5433/x?sslmode=require&sslpassword=S3cretQ", "S3cretQ"),
    ("postgresql://u:S3cretQ@h1:5432,h2:5433/x?target_session_attrs=read-write", "S3cretQ"),
    ("postgresql://u@h/x?PASSWORD=S3cretQ%21", "S3cretQ!"),
    ("postgresql://u@h/x?password=S3cretQ+x", "S3cretQ x"),
    ("mysql://root@127.0.0.1:3306/db?password=S3cretQ", "S3cretQ"),
    ("mysql://root@127.0.0.1:3306/db?charset=utf8mb4&passwd=S3cretQ", "S3cretQ"),
    ("mysql://root:S3cretQ@127.0.0.1:3306/db?password=S3cretQ", "S3cretQ"),
    ("host=127.0.0.1 port=5432 dbname=x user=postgres password=S3cretQ", "S3cretQ"),
    ("host=127.0.0.1 password='S3cretQ with spaces' dbname=x", "S3cretQ with spaces"),
    (r"host=127.0.0.1 password = 'S3cretQ\'s' dbname=x", "S3cretQ's"),
    ("password=S3cretQ", "S3cretQ"),
]


@pytest.mark.parametrize(("url", "secret"), SECRET_FORMS)
def test_every_form_of_password_is_hidden(url: str, secret: str) -> None:
    assert "S3cretQ" not in shown_url(url)
    assert "***" in shown_url(url)
    quoted = f"the driver said: cannot read {url} near {secret!r}"
    assert "S3cretQ" not in masked(quoted, url)


@pytest.mark.parametrize(("url", "secret"), SECRET_FORMS)
def test_a_url_refused_never_names_its_password(url: str, secret: str) -> None:
    """A key/value string is no URL of denpyo's; a MySQL URL's password is not a query
    option: each is refused without the password in the reason."""
    try:
        denpyo.Ledger(url).close()
    except InvalidDatabaseURL as exc:
        assert "S3cretQ" not in str(exc)


def test_what_is_no_password_stays() -> None:
    url = "postgresql://u@h:5432/x?passfile=/home/u/.pgpass&sslmode=require"
    assert shown_url(url) == url
    assert shown_url("host=h dbname=x passfile=/p") == "host=h dbname=x passfile=/p"
    assert shown_url("postgresql://u:pw@h/x?password=q&a=1") == (
        "postgresql://u:***@h/x?password=***&a=1"
    )
