"""Ready-made channels: code that calls one kind of provider and classifies the outcome.

- `denpyo.channels.http.HttpChannel` posts JSON with the idempotency key in a
  header or a body field, and verifies by a lookup URL;
- `denpyo.channels.rabbitmq.RabbitMQChannel` publishes to RabbitMQ with publisher
  confirms, the key as ``message_id`` (extra ``denpyo[rabbitmq]``);
- `denpyo.channels.nats.JetStreamChannel` publishes to NATS JetStream, the key as
  ``Nats-Msg-Id`` (extra ``denpyo[nats]``);
- `denpyo.channels.stripe.StripeChannel`, `denpyo.channels.sendgrid.SendGridChannel`
  and `denpyo.channels.twilio.TwilioChannel`, on the providers' own SDKs (extras
  ``stripe``, ``sendgrid``, ``twilio``): register each with
  ``ledger.add_channel(name, **channel.options)``.

A channel raises `denpyo.errors.Transient` or `denpyo.errors.Rejected` when the
provider's answer is certain; anything else it raises means the call may have
arrived.
"""
