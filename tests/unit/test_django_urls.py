"""denpyo.contrib.django.url_of: the ledger's URL from an entry of Django's DATABASES."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("django")

import denpyo
from denpyo.contrib.django import url_of
from denpyo.store import open_store


def test_sqlite_is_the_absolute_path_of_its_file(
    tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    url = url_of({"ENGINE": "django.db.backends.sqlite3", "NAME": "db dir/app.db"})
    assert url == f"sqlite:///{tmp_path}/db%20dir/app.db"
    assert getattr(open_store(url), "path", None) == f"{tmp_path}/db dir/app.db"


@pytest.mark.parametrize("name", ["", ":memory:", "file:memorydb_default?mode=memory&cache=shared"])
def test_an_in_memory_sqlite_database_is_refused(name: str) -> None:
    with pytest.raises(denpyo.ConfigurationError, match="not a file"):
        url_of({"ENGINE": "django.db.backends.sqlite3", "NAME": name})


def test_postgresql_with_login_host_port_and_options() -> None:
    url = url_of(
        {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": "shop",
            "USER": "app",
            "PASSWORD": "p@ss/w:rd",
            "HOST": "db.internal",
            "PORT": 6432,
            "OPTIONS": {"sslmode": "require", "pool": True, "server_side_binding": False},
        }
    )
    assert url == "postgresql://app:p%40ss%2Fw%3Ard@db.internal:6432/shop?sslmode=require"


def test_postgresql_on_a_unix_socket_and_postgis() -> None:
    url = url_of(
        {
            "ENGINE": "django.contrib.gis.db.backends.postgis",
            "NAME": "shop",
            "USER": "app",
            "HOST": "/var/run/postgresql",
            "PORT": "5433",
        }
    )
    assert url == "postgresql://app@/shop?host=%2Fvar%2Frun%2Fpostgresql&port=5433"


def test_mysql_and_an_ipv6_host() -> None:
    url = url_of(
        {
            "ENGINE": "django.db.backends.mysql",
            "NAME": "shop",
            "USER": "root",
            "HOST": "::1",
            "PORT": "3306",
            "OPTIONS": {"charset": "utf8", "connect_timeout": 5},
        }
    )
    assert url == "mysql://root@[::1]:3306/shop?connect_timeout=5"


def test_mysql_on_a_unix_socket() -> None:
    url = url_of(
        {"ENGINE": "django.db.backends.mysql", "NAME": "shop", "HOST": "/run/mysqld/mysqld.sock"}
    )
    assert url == "mysql:///shop?unix_socket=%2Frun%2Fmysqld%2Fmysqld.sock"


def test_an_engine_denpyo_does_not_store_in_is_refused() -> None:
    with pytest.raises(denpyo.ConfigurationError, match="oracle"):
        url_of({"ENGINE": "django.db.backends.oracle", "NAME": "shop"})
