"""A small shop that enqueues an order's invoice email in the order's transaction.
Its database: ./shop.db, or DATABASE_URL=postgresql://USER@HOST/NAME (or
sqlite:///PATH, another SQLite file)."""

import os
from pathlib import Path
from urllib.parse import urlsplit

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "an-example-only"  # your own, from the environment, in production
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
USE_TZ = True
ROOT_URLCONF = "shop_site.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --8<-- [start:apps]
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "denpyo.contrib.django",  # denpyo's tables, its admin, `manage.py denpyo_worker`
    "shop",
]
# --8<-- [end:apps]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
STATIC_URL = "static/"
TEST_RUNNER = "shop_site.testing.TestRunner"  # closes the ledger before the test database goes

# The ledger goes to the same database (DENPYO_DATABASE_URL would name another).
_database_url = os.environ.get("DATABASE_URL", "")
_url = urlsplit(_database_url)
if _url.scheme.startswith("postgres"):
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": _url.path.lstrip("/"),
            "USER": _url.username or "",
            "PASSWORD": _url.password or "",
            "HOST": _url.hostname or "",
            "PORT": _url.port or "",
        }
    }
else:  # SQLite: an atomic() block takes the write lock when it starts (Django 5.1+)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": (
                _database_url.removeprefix("sqlite:///")
                if _url.scheme == "sqlite"
                else BASE_DIR / "shop.db"
            ),
            "OPTIONS": {"transaction_mode": "IMMEDIATE"},
            "TEST": {"NAME": BASE_DIR / "test.db"},  # a file: the ledger's connections reach it
        }
    }
