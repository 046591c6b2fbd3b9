"""The public API is deliberately small: this test guards it."""

from pathlib import Path

import pytest

import denpyo
import denpyo.errors

EXPECTED = {
    "Ledger",
    "Submission",
    "Status",
    "ErrorKind",
    "Event",
    "Backoff",
    "Transient",
    "Rejected",
    "Delivered",
    "NotDelivered",
    "Unknown",
    "Verdict",
    "Outcome",
    "OutcomeKind",
    "Alert",
    "WorkReport",
    "MAX_KEY_LENGTH",
    "MAX_PAYLOAD_BYTES",
    "KeyReused",
    "run_again_on_conflict",
    "DenpyoError",
    "ConfigurationError",
    "InvalidDatabaseURL",
    "UnknownChannel",
    "SchemaError",
    "InvalidInput",
    "PayloadNotJSON",
    "PayloadTooLarge",
    "InvalidKey",
    "TransitionNotAllowed",
    "LeaseLost",
    "StoreError",
    "StoreUnavailable",
    "StoreConflict",
    "SubmissionError",
    "SubmissionRejected",
    "SubmissionFailed",
    "RemoteRecord",
    "AuditReport",
    "Discrepancy",
    "DiscrepancyKind",
    "SubmissionInDoubt",
    "SubmissionResolved",
    "LeaseExpired",
    "ArchiveError",
    "ArchiveReport",
    "ReportRow",
    "SubmissionNotFound",
    "ChannelSignal",
    "Approval",
    "Redaction",
    "new_payload_key",
    "SealedPayload",
    "KeyRotation",
    "PayloadCodec",
    "ProviderEvent",
    "Received",
}


def test_all_is_exactly_the_public_api() -> None:
    assert set(denpyo.__all__) == EXPECTED
    for name in denpyo.__all__:
        assert hasattr(denpyo, name), name


def test_every_error_descends_from_one_base() -> None:
    for name in dir(denpyo.errors):
        obj = getattr(denpyo.errors, name)
        if (
            isinstance(obj, type)
            and issubclass(obj, Exception)
            and obj.__module__ == "denpyo.errors"
        ):
            assert issubclass(obj, denpyo.DenpyoError), name
            assert name in (denpyo.errors.__doc__ or ""), f"{name} missing from the error tree"


def test_every_denpyo_error_the_package_defines_lives_in_the_error_tree() -> None:
    """Import every module, then walk DenpyoError's subclasses: each is defined in
    errors.py and drawn in its docstring, so the tree there is the whole tree."""
    import importlib
    import pkgutil

    for module in pkgutil.walk_packages(denpyo.__path__, "denpyo."):
        # Framework integrations (denpyo.contrib) import only inside a configured
        # framework (Django's models need its settings); they define no errors.
        if module.name.startswith("denpyo.contrib."):
            continue
        if module.name.split(".")[-1] != "__main__":
            importlib.import_module(module.name)
    found, todo = set(), [denpyo.DenpyoError]
    while todo:
        cls = todo.pop()
        found.add(cls)
        todo.extend(cls.__subclasses__())
    for cls in found:
        assert cls.__module__ == "denpyo.errors", (
            f"{cls.__qualname__} is defined in {cls.__module__}"
        )
        assert cls.__name__ in (denpyo.errors.__doc__ or ""), f"{cls.__name__} not in the tree"
    assert len(found) > 20


def test_settings_out_of_range_are_configuration_errors(tmp_path: Path) -> None:
    from denpyo.engine.worker import Worker

    ledger = denpyo.Ledger(f"sqlite:///{tmp_path}/never-written.db")
    try:
        bad: list[dict[str, object]] = [
            {"lease": 0},
            {"concurrency": 0},
            {"rate_limit": -1},
            {"max_attempts": 0},
            {"verify": "not callable"},
        ]
        for options in bad:
            with pytest.raises(denpyo.ConfigurationError):
                ledger.channel("c", **options)(lambda sub: "r")  # type: ignore[arg-type]
        assert ledger.channels == {}
        with pytest.raises(denpyo.ConfigurationError):
            denpyo.Backoff(initial=5, maximum=1)
        for worker_options in ({"concurrency": 0}, {"poll_interval": 0}, {"grace": -1}):
            with pytest.raises(denpyo.ConfigurationError):
                Worker(ledger, **worker_options)  # type: ignore[arg-type]
    finally:
        ledger.close()


@pytest.mark.parametrize("limit", [-1, 0, 1.5, "1024", True, None])
def test_a_payload_limit_that_is_no_size_is_refused(tmp_path: Path, limit: object) -> None:
    with pytest.raises(denpyo.InvalidInput, match="max_payload_bytes"):
        denpyo.Ledger(f"sqlite:///{tmp_path}/never-written.db", max_payload_bytes=limit)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["mail2\n", "bad name!", "", "-mail", "m" * 101, "mail\x00"])
def test_a_channel_name_that_is_not_plain_is_invalid_input(tmp_path: Path, name: str) -> None:
    """`$` let a trailing newline through, and the error was a bare ValueError."""
    with denpyo.Ledger(f"sqlite:///{tmp_path}/never-written.db") as ledger:
        with pytest.raises(denpyo.InvalidInput, match="channel name"):
            ledger.channel(name)(lambda sub: "r")
        with pytest.raises(denpyo.InvalidInput, match="channel name"):
            ledger.add_channel(name, lambda sub: "r")
        assert ledger.channels == {}
