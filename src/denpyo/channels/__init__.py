"""Ready-made channels: code that calls one kind of provider and classifies the outcome.

`denpyo.channels.http.HttpChannel` posts JSON with an ``Idempotency-Key`` header
and verifies by a lookup URL. A channel raises `denpyo.errors.Transient` or
`denpyo.errors.Rejected` when the provider's answer is certain; anything else it
raises means the call may have arrived.
"""
