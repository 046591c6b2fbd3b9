"""`denpyo webhooks`: the providers' webhooks (denpyo.webhooks) served alone."""

from __future__ import annotations

import os

import click

from denpyo.cli import render
from denpyo.cli.app import Env, fail, main, pass_env
from denpyo.cli.commands import listen, listen_options, serve_asgi, url_of, warn_if_public

SNS_TOPICS_VARIABLE = "DENPYO_SNS_TOPICS"


@main.command()
@listen_options(8471)
@click.option(
    "--stripe-secret",
    envvar="DENPYO_STRIPE_WEBHOOK_SECRET",
    metavar="WHSEC",
    help="The Stripe endpoint's signing secret (whsec_…): serves POST /stripe. "
    "[env: DENPYO_STRIPE_WEBHOOK_SECRET]",
)
@click.option(
    "--sendgrid-public-key",
    envvar="DENPYO_SENDGRID_WEBHOOK_KEY",
    metavar="KEY",
    help="SendGrid's signed event webhook verification key: serves POST /sendgrid. "
    "[env: DENPYO_SENDGRID_WEBHOOK_KEY]",
)
@click.option(
    "--twilio-auth-token",
    envvar="DENPYO_TWILIO_AUTH_TOKEN",
    metavar="TOKEN",
    help="The Twilio account's auth token: serves POST /twilio. [env: DENPYO_TWILIO_AUTH_TOKEN]",
)
@click.option(
    "--twilio-url",
    envvar="DENPYO_TWILIO_WEBHOOK_URL",
    metavar="URL",
    help="The URL Twilio calls (its signature covers it), when a proxy stands between; "
    "else the request's own. [env: DENPYO_TWILIO_WEBHOOK_URL]",
)
@click.option(
    "--sns-topic",
    "sns_topics",
    multiple=True,
    metavar="ARN",
    help="A topic whose messages (SES events) are read: serves POST /sns (repeat for "
    f"more). [env: {SNS_TOPICS_VARIABLE}, comma-separated]",
)
@click.option(
    "--sns-confirm",
    is_flag=True,
    help="Confirm the SNS subscriptions of those topics (else their URL is logged).",
)
@pass_env
def webhooks(
    env: Env,
    host: str,
    port: int,
    stripe_secret: str | None,
    sendgrid_public_key: str | None,
    twilio_auth_token: str | None,
    twilio_url: str | None,
    sns_topics: tuple[str, ...],
    sns_confirm: bool,
) -> None:
    """Serve the providers' webhooks: each signed event settles the row it names (a row
    in doubt becomes synced), adds to a synced row's history, or is kept for the
    audit. A route per provider given; refuses to start with none.

    \b
    Example: DENPYO_STRIPE_WEBHOOK_SECRET=whsec_… denpyo --db postgresql://app@db/app webhooks
    Example: denpyo webhooks --port 8471 --sns-topic arn:aws:sns:eu-west-1:1234:ses-events
    """
    topics = list(sns_topics) or [
        t.strip() for t in os.environ.get(SNS_TOPICS_VARIABLE, "").split(",") if t.strip()
    ]
    if not (stripe_secret or sendgrid_public_key or twilio_auth_token or topics):
        fail(
            "no provider to serve: give --stripe-secret, --sendgrid-public-key, "
            "--twilio-auth-token or --sns-topic (or their environment variables)"
        )
    from denpyo.webhooks import create_app

    app = create_app(
        env.ledger,
        stripe_secret=stripe_secret,
        sendgrid_public_key=sendgrid_public_key,
        twilio_auth_token=twilio_auth_token,
        twilio_url=twilio_url,
        sns_topics=topics,
        sns_confirm=sns_confirm,
    )
    listening = listen(host, port, "the webhooks")
    routes = ", ".join(f"POST /{name}" for name in app.state.providers)
    render.err.print(f"webhooks on {url_of(host, port)}: {routes}", markup=False)
    warn_if_public(host)
    serve_asgi(app, listening)
