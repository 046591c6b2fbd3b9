"""`manage.py denpyo_worker`: the worker of `denpyo worker`, on the project's ledger.

Django is set up first (every app's `ready()` has run), so the channels your apps
register on `get_ledger()` are there, and channel code may use the ORM.

With `--processes N`, N such workers run as child processes under the supervisor
of `denpyo worker --processes N` (denpyo/cli/processes.py): each child is this
command again with `--processes 1`, run by the same `manage.py` (or, when the
command was not started from a `manage.py`, by `python -m django`), with the
same settings.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from denpyo.contrib.django import get_ledger
from denpyo.domain.settings import DEFAULT_CONCURRENCY, DEFAULT_GRACE, DEFAULT_POLL_INTERVAL
from denpyo.engine import operator as op
from denpyo.engine.processes import MAX_PROCESSES
from denpyo.errors import DenpyoError


class Command(BaseCommand):
    help = (
        "Send, retry and reconcile denpyo's rows until SIGINT or SIGTERM; then stop "
        "claiming, give back rows not yet started, and let the calls in flight finish "
        "(up to --grace seconds). Example: manage.py denpyo_worker --concurrency 32"
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--concurrency",
            type=int,
            default=DEFAULT_CONCURRENCY,
            help=f"Calls in flight at once ({DEFAULT_CONCURRENCY}).",
        )
        parser.add_argument(
            "--poll-interval",
            type=float,
            default=DEFAULT_POLL_INTERVAL,
            help=f"Seconds between looks for due rows when idle ({DEFAULT_POLL_INTERVAL}).",
        )
        parser.add_argument(
            "--grace",
            type=float,
            default=DEFAULT_GRACE,
            help="On SIGINT/SIGTERM, seconds the calls in flight get to finish "
            f"({DEFAULT_GRACE:g}).",
        )
        parser.add_argument(
            "--processes",
            type=int,
            default=1,
            help="Worker processes, each with --concurrency calls in flight, under one "
            "supervisor that passes SIGINT/SIGTERM on and restarts those that die (1).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not 1 <= options["processes"] <= MAX_PROCESSES:
            raise CommandError(f"--processes must be from 1 to {MAX_PROCESSES}", returncode=2)
        if options["processes"] > 1:
            self._supervise(options)
            return
        ledger = get_ledger()
        if not ledger.channels:
            raise CommandError(
                "no channels are registered: register them on denpyo.contrib.django."
                "get_ledger() where your app starts (its AppConfig.ready)",
                returncode=2,
            )
        names = ", ".join(sorted(ledger.channels)) or "none"
        self.stderr.write(f"worker started on channels: {names}; Ctrl-C or SIGTERM stops it")
        try:
            report = op.serve(
                ledger,
                concurrency=options["concurrency"],
                poll_interval=options["poll_interval"],
                grace=options["grace"],
            )
        except DenpyoError as exc:
            raise CommandError(str(exc), returncode=2) from exc
        self.stderr.write(f"worker stopped: {report.summary()}")

    def _supervise(self, options: dict[str, Any]) -> None:
        """N children, each this command with `--processes 1`, under the supervisor."""
        from denpyo.engine.processes import Supervisor

        settings = options.get("settings") or os.environ.get("DJANGO_SETTINGS_MODULE")
        entry = sys.argv[0] if os.path.basename(sys.argv[0]) == "manage.py" else None
        command = [
            sys.executable,
            *([entry] if entry else ["-m", "django"]),
            "denpyo_worker",
            "--processes",
            "1",
            "--concurrency",
            str(options["concurrency"]),
            "--poll-interval",
            str(options["poll_interval"]),
            "--grace",
            str(options["grace"]),
            *(["--settings", settings] if settings else []),
            *(["--pythonpath", options["pythonpath"]] if options.get("pythonpath") else []),
        ]

        def say(line: str) -> None:
            self.stderr.write(line)
            self.stderr.flush()

        code = Supervisor([command] * options["processes"], say).run()
        if code != 0:
            raise CommandError(f"worker processes ended with exit code {code}", returncode=code)
