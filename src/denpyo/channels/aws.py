"""Amazon SQS FIFO, SNS FIFO and SES v2, called with boto3 (the extra ``denpyo[aws]``).

Each channel is built with a boto3 client; its ``options`` (its ``send`` and the
settings of `Ledger.channel` it knows) register it::

    ledger.add_channel("order-created", **queue.options)

- `SqsFifoChannel`: ``send_message`` to a FIFO queue, ``MessageDeduplicationId``
  = the row's key (`_keys.fifo_dedup_id`). SQS drops a message whose
  deduplication id it accepted in the last 5 minutes, so the channel is
  ``idempotent`` with a window of 270 s: an in-doubt row is resent while SQS still
  remembers its id, and left for a person after.
- `SnsFifoChannel`: ``publish`` to a FIFO topic, the same ids and window.
- `SesChannel`: ``send_email`` (SES v2), the key as the ``denpyo_key`` email
  tag. SES keeps no idempotency key and cannot be asked about a message: not
  idempotent, no verify. A row in doubt waits for SES's event notification (the
  webhooks' ``/sns`` route) or a person.

None of them can be asked "did K arrive?" or listed: no ``verify``, no
``list_remote``. How a call is classified:

- an answer: the ``MessageId`` is the row's remote id;
- throttling (``Throttling``, ``TooManyRequestsException``…), a 503
  (``ServiceUnavailable``), a request timeout the service reports, expired
  credentials, no credentials found, or no connection made (refused, DNS, connect
  timeout): `Transient`: the service did not act;
- a 500, 502 or 504 (``InternalFailure``, ``InternalError``): raised as
  `ConnectionError`, *ambiguous*: the service may have acted before it failed;
- any other error answer (a missing queue or topic, a validation error, an
  unverified sender, access denied), or parameters boto3 refuses before sending:
  `Rejected`;
- a read timeout or a connection closed after the request was sent: raised as
  `TimeoutError` / `ConnectionError`, which the engine records as *ambiguous*.

boto3 retries throttling, 5xx and connection errors itself (its ``retries``
setting) before the channel sees them: harmless for SQS and SNS FIFO (a retry
within the window carries the same deduplication id), but a retried SES call
after a read timeout may send the email twice, so `SesChannel` wants a client
that does not retry (``Config(retries={"total_max_attempts": 1})``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from denpyo.channels._keys import FIELD, fifo_dedup_id, ses_tag_value
from denpyo.domain.limits import wire_body
from denpyo.domain.submission import Submission
from denpyo.engine import tracing
from denpyo.errors import ConfigurationError, Rejected, Transient
from denpyo.extras import missing

try:
    import botocore.exceptions
except ImportError as exc:  # the extra is not installed
    raise missing("aws", "denpyo.channels.aws", exc) from exc

FIFO_WINDOW = 270.0
"""The idempotency window of the FIFO channels, in seconds: SQS and SNS remember a
deduplication id for 5 minutes from the first copy's arrival; 30 s less, for a margin."""

DEFAULT_GROUP = "denpyo"
"""The ``MessageGroupId`` of a row with no ordering key (one group: one order)."""

_THROTTLED = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "LimitExceededException",
        "SlowDown",
        "BandwidthLimitExceeded",
        "ProvisionedThroughputExceededException",
        "KMSThrottlingException",
    }
)
_TRANSIENT = frozenset(
    {
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
        "TransactionInProgressException",
        "ServiceUnavailable",
        "ExpiredToken",
        "ExpiredTokenException",
        "RequestExpired",
    }
)

Group = str | Callable[[Submission], str]


def _error_code(exc: botocore.exceptions.ClientError) -> tuple[str, int]:
    error = exc.response.get("Error", {})
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return str(error.get("Code", "")), int(status or 0)


def call(what: str, operation: Callable[..., dict[str, Any]], **params: Any) -> dict[str, Any]:
    """One boto3 call, its errors classified as the module docstring says."""
    try:
        return operation(**params)
    except botocore.exceptions.ClientError as exc:
        code, status = _error_code(exc)
        if code in _THROTTLED:
            raise Transient(f"{what}: throttled ({code})", throttled=True) from exc
        if code in _TRANSIENT or status == 503:
            raise Transient(f"{what}: {code or status} (the service did not act)") from exc
        if status >= 500:
            raise ConnectionError(
                f"{what}: {code or 'error'} (HTTP {status});"
                " the service may have acted before it failed"
            ) from exc
        raise Rejected(f"{what}: {exc}") from exc
    except botocore.exceptions.ParamValidationError as exc:
        raise Rejected(f"{what}: boto3 refused the parameters, nothing was sent: {exc}") from exc
    except (botocore.exceptions.NoCredentialsError, botocore.exceptions.NoRegionError) as exc:
        raise Transient(f"{what}: not sent: {exc}") from exc
    except botocore.exceptions.ConnectionError as exc:
        # EndpointConnectionError, ConnectTimeoutError, ProxyConnectionError: no
        # connection was made, so nothing was sent.
        raise Transient(f"{what}: cannot connect: {exc}") from exc
    except botocore.exceptions.ReadTimeoutError as exc:
        raise TimeoutError(f"{what}: no answer in time ({exc}); it may have arrived") from exc
    except botocore.exceptions.HTTPClientError as exc:
        raise ConnectionError(
            f"{what}: the connection failed after the request was sent ({exc}); it may have arrived"
        ) from exc


def _attributes(key: str) -> dict[str, Any]:
    """The message attributes: the row's key, and the attempt's trace context."""
    values = {FIELD: key, **tracing.traced({})}
    return {name: {"DataType": "String", "StringValue": str(v)} for name, v in values.items()}


class _FifoChannel:
    """What SQS FIFO and SNS FIFO share: the message, its ids, the window, the
    options. Each subclass names its service, operation and parameter names."""

    _SERVICE, _KIND, _OPERATION, _TARGET, _BODY = "", "", "", "", ""

    def __init__(
        self,
        client: Any,
        target: str,
        *,
        group: Group = DEFAULT_GROUP,
        idempotency_window: float = FIFO_WINDOW,
    ) -> None:
        if not target.endswith(".fifo"):
            raise ConfigurationError(f"{target!r} is not a FIFO {self._KIND} (its name ends .fifo)")
        if not callable(group) and not (isinstance(group, str) and group):
            raise ConfigurationError("group must be non-empty text or a function of the row")
        if not 0 < idempotency_window <= 300:
            raise ConfigurationError(
                "idempotency_window must be positive seconds, at most the 300 s"
                " SQS and SNS keep a deduplication id"
            )
        self.client = client
        self.target = target
        self.group = group
        self.idempotency_window = idempotency_window

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.target}>"

    @property
    def options(self) -> dict[str, Any]:
        """For ``ledger.add_channel(name, **options)``: `send`, and idempotent within
        the window (a resend under the same deduplication id is dropped by AWS)."""
        return {
            "send": self.send,
            "idempotent": True,
            "idempotency_window": self.idempotency_window,
        }

    def ids(self, sub: Submission) -> dict[str, str]:
        """``MessageGroupId`` (the row's ordering key, else `group`) and
        ``MessageDeduplicationId`` (the row's key), each made to fit by `_keys`."""
        if sub.ordering_key is not None:
            group = sub.ordering_key
        else:
            group = self.group(sub) if callable(self.group) else self.group
        return {
            "MessageGroupId": fifo_dedup_id(group),
            "MessageDeduplicationId": fifo_dedup_id(sub.idempotency_key),
        }

    def send(self, sub: Submission) -> str:
        """Send the message: the payload as its JSON body, the key as its
        deduplication id and its ``denpyo_key`` attribute; the ``MessageId`` is the
        remote id."""
        params = {
            self._TARGET: self.target,
            self._BODY: wire_body(sub.payload).decode(),
            "MessageAttributes": _attributes(sub.idempotency_key),
            **self.ids(sub),
        }
        sub.check_lease()  # the last moment: nothing sent yet
        operation = getattr(self.client, self._OPERATION)
        answer = call(f"{self._SERVICE} {self.target}", operation, **params)
        return str(answer["MessageId"])


class SqsFifoChannel(_FifoChannel):
    """Send each row as one message to the FIFO queue `queue_url` (``send_message``)."""

    _SERVICE, _KIND, _OPERATION, _TARGET, _BODY = (
        "SQS",
        "queue",
        "send_message",
        "QueueUrl",
        "MessageBody",
    )

    def __init__(
        self,
        client: Any,
        queue_url: str,
        *,
        group: Group = DEFAULT_GROUP,
        idempotency_window: float = FIFO_WINDOW,
    ) -> None:
        super().__init__(client, queue_url, group=group, idempotency_window=idempotency_window)
        self.queue_url = queue_url


class SnsFifoChannel(_FifoChannel):
    """Publish each row as one message to the FIFO topic `topic_arn` (``publish``),
    with the same body, attribute and ids as `SqsFifoChannel`."""

    _SERVICE, _KIND, _OPERATION, _TARGET, _BODY = (
        "SNS",
        "topic",
        "publish",
        "TopicArn",
        "Message",
    )

    def __init__(
        self,
        client: Any,
        topic_arn: str,
        *,
        group: Group = DEFAULT_GROUP,
        idempotency_window: float = FIFO_WINDOW,
    ) -> None:
        super().__init__(client, topic_arn, group=group, idempotency_window=idempotency_window)
        self.topic_arn = topic_arn


def _retries_once(client: Any) -> bool:
    """Whether a boto3 client makes each call once (no retry of its own)."""
    retries = getattr(client.meta.config, "retries", None) or {}
    return retries.get("total_max_attempts") == 1 or retries.get("max_attempts") == 0


class SesChannel:
    """Send each row as one email with SES v2's ``send_email``.

    The row's payload is ``send_email``'s parameters as JSON (``Destination``,
    ``Content``, and ``FromEmailAddress`` unless `from_address` gives it). The
    channel adds the ``denpyo_key`` email tag (the key, through
    `_keys.ses_tag_value`) and `configuration_set` (the configuration set whose
    event destination publishes to the SNS topic the webhooks read) unless the
    payload names one.
    """

    def __init__(
        self,
        client: Any,
        *,
        from_address: str | None = None,
        configuration_set: str | None = None,
    ) -> None:
        if not _retries_once(client):
            raise ConfigurationError(
                "SesChannel needs a client that makes each call once: SES would send a"
                " retried email twice. Make it with"
                ' botocore.config.Config(retries={"total_max_attempts": 1})'
            )
        self.client = client
        self.from_address = from_address
        self.configuration_set = configuration_set

    def __repr__(self) -> str:
        return f"<SesChannel from={self.from_address!r} set={self.configuration_set!r}>"

    @property
    def options(self) -> dict[str, Any]:
        """For ``ledger.add_channel(name, **options)``: `send`; SES keeps no key and
        has no lookup, so not idempotent and no verify: a row in doubt waits for the
        webhook or a person."""
        return {"send": self.send, "idempotent": False}

    def request(self, sub: Submission) -> dict[str, Any]:
        """The parameters of ``send_email`` for the row (its payload, the tag added)."""
        if not isinstance(sub.payload, dict):
            raise Rejected(
                f"the payload is a JSON {type(sub.payload).__name__}, not the object of"
                " send_email's parameters; nothing was sent"
            )
        params: dict[str, Any] = json.loads(wire_body(sub.payload))  # a copy, to add to
        if self.from_address is not None:
            params.setdefault("FromEmailAddress", self.from_address)
        if self.configuration_set is not None:
            params.setdefault("ConfigurationSetName", self.configuration_set)
        try:
            tag = ses_tag_value(sub.idempotency_key)
        except ValueError as exc:
            raise Rejected(f"{exc}; nothing was sent") from exc
        tags = [t for t in params.get("EmailTags", []) if t.get("Name") != FIELD]
        params["EmailTags"] = [*tags, {"Name": FIELD, "Value": tag}]
        return params

    def send(self, sub: Submission) -> str:
        """Send the email; its ``MessageId`` is the remote id."""
        params = self.request(sub)
        sub.check_lease()
        answer = call("SES send_email", self.client.send_email, **params)
        return str(answer["MessageId"])
