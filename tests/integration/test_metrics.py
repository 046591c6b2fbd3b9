"""Prometheus metrics: the engine's calls and alerts counted through its hooks, and
the ledger's counts read from the store, on every database."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import denpyo
from denpyo.metrics import Metrics


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def channel(ledger: denpyo.Ledger) -> None:
    @ledger.channel("mail", max_attempts=1)
    def send(sub: denpyo.Submission) -> str:
        outcome = sub.payload["outcome"]
        if outcome == "rejected":
            raise denpyo.Rejected("550 unknown mailbox")
        if outcome == "transient":
            raise denpyo.Transient("503")
        if outcome == "ambiguous":
            raise TimeoutError("read timeout")
        return "m-1"


def test_calls_alerts_and_counts_are_exported(ledger: denpyo.Ledger) -> None:
    channel(ledger)
    metrics = Metrics(ledger, counts_ttl=0).attach()
    outcomes = ["synced", "synced", "rejected", "transient", "ambiguous"]
    for i, outcome in enumerate(outcomes):
        ledger.enqueue("mail", f"k{i}", {"outcome": outcome})
    ledger.work(until_idle=True, poll_interval=0.05)
    found = samples(metrics)

    def value(name: str, **labels: str) -> Any:
        return found.get((name, tuple(sorted(labels.items()))))

    assert value("denpyo_calls_total", channel="mail", outcome="synced") == 2
    assert value("denpyo_calls_total", channel="mail", outcome="rejected") == 1
    assert value("denpyo_calls_total", channel="mail", outcome="failed") == 1
    assert value("denpyo_calls_total", channel="mail", outcome="ambiguous") == 1
    assert value("denpyo_call_duration_seconds_count", channel="mail") == 5
    assert value("denpyo_alerts_total", channel="mail", reason="rejected") == 1
    assert value("denpyo_alerts_total", channel="mail", reason="exhausted") == 1
    assert value("denpyo_alerts_total", channel="mail", reason="in_doubt") == 1
    assert value("denpyo_store_up") == 1
    assert value("denpyo_rows", channel="mail", status="synced") == 2
    assert value("denpyo_rows", channel="mail", status="failed") == 2
    assert value("denpyo_rows", channel="mail", status="rejected") == 1
    assert value("denpyo_in_doubt", channel="mail") == 1
    assert value("denpyo_needs_person", channel="mail") == 3
    assert value("denpyo_oldest_pending_seconds", channel="mail") == 0
    # Labels stay few: never a key, an id or a payload.
    for _name, labels in found:
        assert {label for label, _ in labels} <= {
            "channel",
            "status",
            "outcome",
            "reason",
            "state",
            "le",
        }


def test_each_channels_state_is_one_gauge_per_mode(ledger: denpyo.Ledger) -> None:
    """`denpyo_channel_state`: 1 for the mode each channel is in now, 0 for the three
    others, for the channels registered and those with a state (a channel paused
    ahead, before the application registers it, included)."""
    channel(ledger)
    ledger.channel("sms")(lambda sub: "s-1")
    ledger.channel("push")(lambda sub: "p-1")
    metrics = Metrics(ledger, counts_ttl=0)
    ledger.pause("mail", note="provider incident", by="alice")
    ledger.pause("launch", note="not before Monday", by="bob")
    ledger.store.throttle_channel("sms", throttle_for=600, note="429 Too Many Requests")
    ledger.store.channel_down("push", actor="worker:test", note="10 calls failed", probe_in=2)
    found = samples(metrics)
    modes = {"active", "paused", "throttled", "down"}
    expected = {"mail": "paused", "launch": "paused", "sms": "throttled", "push": "down"}
    for name, now in expected.items():
        values = {
            mode: found.get(("denpyo_channel_state", (("channel", name), ("state", mode))))
            for mode in modes
        }
        assert values == {mode: 1.0 if mode == now else 0.0 for mode in modes}, (name, values)
    ledger.resume("mail", note="fixed", by="alice")
    found = samples(Metrics(ledger, counts_ttl=0))  # a read is kept 10 times as long as it took
    key = ("denpyo_channel_state", (("channel", "mail"), ("state", "active")))
    assert found[key] == 1.0


def test_a_database_that_cannot_be_read_says_so(tmp_path: Any) -> None:
    with denpyo.Ledger(f"sqlite:///{tmp_path}/never-migrated.db") as ledger:
        found = samples(Metrics(ledger, counts_ttl=0))
    assert found[("denpyo_store_up", ())] == 0
    assert not any(name == "denpyo_rows" for name, _ in found)


def test_a_failing_watcher_changes_nothing_the_engine_records(ledger: denpyo.Ledger) -> None:
    channel(ledger)

    @ledger.on_call
    def broken(record: Any) -> None:
        raise RuntimeError("a bug in someone's metrics")

    sub = ledger.submit("mail", "k", {"outcome": "synced"})
    assert sub.status is denpyo.Status.SYNCED


def test_the_grafana_dashboard_and_alerts_use_only_exported_series(
    ledger: denpyo.Ledger,
) -> None:
    """docs/grafana's dashboard and alert rules name series a worker exports, with
    labels it gives them: a rename on either side breaks this, not a panel in prod."""
    import json
    import re
    from pathlib import Path

    import yaml

    channel(ledger)
    metrics = Metrics(ledger, counts_ttl=0).attach()
    ledger.enqueue("mail", "k", {"outcome": "ambiguous"})
    ledger.work(until_idle=True, poll_interval=0.05)
    exported: dict[str, set[str]] = {}
    for name, labels in samples(metrics):
        exported.setdefault(name, set()).update(label for label, _ in labels)
    grafana = Path(__file__).resolve().parents[2] / "docs" / "grafana"
    dashboard = json.loads((grafana / "denpyo-dashboard.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    rules = yaml.safe_load((grafana / "denpyo-alerts.yml").read_text())
    exprs += [str(rule["expr"]) for group in rules["groups"] for rule in group["rules"]]
    assert exprs
    for expr in exprs:
        for name, selector in re.findall(r"(denpyo_\w+)(\{[^}]*\})?", expr):
            assert name in exported, (name, expr)
            for label in re.findall(r"(\w+)\s*[=!~]", selector):
                assert label in exported[name], (name, label, expr)


def test_the_worker_server_answers_metrics_at_metrics_only(tmp_path: Any) -> None:
    """A scrape config with a mistyped path must fail, not scrape as if all were well."""
    import urllib.error
    import urllib.request

    from conftest import free_port

    port = free_port()
    with denpyo.Ledger(f"sqlite:///{tmp_path}/m.db") as ledger:
        ledger.migrate()
        server = Metrics(ledger, counts_ttl=0).attach().serve(port)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as found:
                assert found.status == 200
                assert b"denpyo_store_up 1.0" in found.read()
            for path in ("/", "/metric", "/metrics/", "/anything", "/favicon.ico"):
                with pytest.raises(urllib.error.HTTPError) as caught:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10)
                assert caught.value.code == 404, path
                assert b"denpyo_" not in caught.value.read()
        finally:
            server.shutdown()
            server.server_close()
