"""The public API is deliberately small: this test guards it."""

import denpyo
import denpyo.errors

EXPECTED = {
    "Ledger", "Submission", "Status", "ErrorKind", "Event", "Backoff", "Transient", "Rejected",
    "Delivered", "NotDelivered", "Unknown", "Verdict", "Outcome", "OutcomeKind", "Alert",
    "WorkReport", "MAX_KEY_LENGTH", "MAX_PAYLOAD_BYTES", "KeyReused",
    "DenpyoError", "ConfigurationError", "InvalidDatabaseURL", "UnknownChannel", "SchemaError",
    "InvalidInput", "PayloadNotJSON", "PayloadTooLarge", "InvalidKey", "TransitionNotAllowed",
    "LeaseLost", "StoreError", "SubmissionError", "SubmissionRejected", "SubmissionFailed",
    "SubmissionInDoubt", "SubmissionResolved", "LeaseExpired",
}  # fmt: skip


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
