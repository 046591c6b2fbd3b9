"""What each page of the dashboard shows, read as a script would (Bearer token)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

import denpyo
from conftest import free_port
from dashboard_seed import seed
from denpyo.web import create_app

TOKEN = "pages-test-token"


@pytest.fixture
def ledger(tmp_path: Any) -> Iterator[denpyo.Ledger]:
    with denpyo.Ledger(f"sqlite:///{tmp_path}/pages.db") as ledger:
        ledger.migrate()
        yield ledger


@pytest.fixture
def ids(ledger: denpyo.Ledger) -> dict[str, int]:
    return seed(ledger, synced=60)


@pytest.fixture
def web(ledger: denpyo.Ledger) -> TestClient:
    client = TestClient(create_app(ledger, token=TOKEN), base_url="http://127.0.0.1:8470")
    client.headers.update({"authorization": f"Bearer {TOKEN}", "x-denpyo-by": "script"})
    return client


def row_ids(html: str) -> list[int]:
    return [int(i) for i in re.findall(r'name="ids" value="(\d+)"', html)]


def test_the_list_pages_by_keyset_and_filters(web: TestClient, ids: dict[str, int]) -> None:
    first = web.get("/submissions").text
    assert row_ids(first) == list(range(max(ids.values()), max(ids.values()) - 50, -1))
    older = re.search(r'href="/submissions\?([^"]*before=\d+[^"]*)"', first)
    assert older
    second = web.get("/submissions?" + older.group(1).replace("&amp;", "&")).text
    assert row_ids(second) == list(range(max(ids.values()) - 50, 0, -1))
    assert "no older rows" in second
    rejected = row_ids(web.get("/submissions?status=rejected").text)
    assert sorted(rejected) == sorted([ids["rejected"], ids["rejected2"]])
    doubt = row_ids(web.get("/submissions?in_doubt=yes").text)
    assert doubt == [ids["doubt"]]
    needs = row_ids(web.get("/submissions?needs_person=1").text)
    assert sorted(needs) == sorted(ids[k] for k in ("rejected", "rejected2", "exhausted", "doubt"))
    assert row_ids(web.get("/submissions?channel=sms").text) == [ids["waiting"]]
    assert row_ids(web.get("/submissions?resolved=yes").text) == []
    assert web.get("/submissions?since=nonsense").status_code == 400


def test_a_search_finds_a_key_in_one_step(web: TestClient, ids: dict[str, int]) -> None:
    found = web.get("/submissions?channel=invoice-email&q=order:42").text
    assert row_ids(found) == [ids["secret"]] and "synced" in found
    many = web.get("/submissions?channel=invoice-email&q=order:1").text
    assert len(row_ids(many)) == 50 and "after=order" in many
    assert web.get("/submissions?q=order:42").status_code == 400  # which channel?


def test_the_queue_and_the_overview(web: TestClient, ids: dict[str, int]) -> None:
    queue = web.get("/attention").text
    wanted = sorted((ids[k] for k in ("rejected", "rejected2", "exhausted", "doubt")), reverse=True)
    assert row_ids(queue) == wanted and "<strong>4</strong> need a person" in queue
    overview = web.get("/").text
    assert "need a person" in overview and "<polyline" in overview
    assert "sent 65" in overview  # every call made (60 + 4 + 1), folded into the chart


def test_a_bulk_dry_run_changes_nothing(
    web: TestClient, ledger: denpyo.Ledger, ids: dict[str, int]
) -> None:
    chosen = [ids["exhausted"], ids["rejected"], ids["synced0"]]
    preview = web.post("/bulk", data={"action": "abandon", "ids": [str(i) for i in chosen]})
    assert preview.status_code == 200
    assert "Abandon 2 of the 3 rows" in preview.text and "synced" in preview.text
    assert all(ledger.get_by_id(i).resolution is None for i in chosen)  # type: ignore[union-attr]
    done = web.post(
        "/bulk",
        data={
            "action": "abandon",
            "confirm": "yes",
            "note": "gone",
            "ids": [str(i) for i in chosen],
        },
    )
    assert "Abandon: 2 done" in done.text
    after = {i: ledger.get_by_id(i) for i in chosen}
    assert after[ids["exhausted"]].resolution == "abandoned by operator:script: gone"  # type: ignore[union-attr]
    assert after[ids["synced0"]].resolution is None  # type: ignore[union-attr]
    no_note = web.post(
        "/bulk", data={"action": "retry", "confirm": "yes", "note": "", "ids": [str(ids["doubt"])]}
    )
    assert no_note.status_code == 400


def test_a_row_shows_its_chain_of_resends_only_when_it_has_one(
    web: TestClient, ids: dict[str, int]
) -> None:
    assert "<dt>resends</dt>" not in web.get(f"/submissions/{ids['rejected']}").text
    resent = web.post(
        f"/submissions/{ids['rejected']}/resend",
        data={"note": "address fixed", "payload": "", "confirm": "yes"},
        follow_redirects=False,
    )
    assert resent.status_code == 303, resent.text
    page = web.get(f"/submissions/{ids['rejected']}").text
    assert "<dt>resends</dt>" in page and "(none)" not in page


def test_a_missing_row_is_404(web: TestClient) -> None:
    assert web.get("/submissions/999999").status_code == 404


def test_a_row_page_says_when_the_providers_idempotency_window_closes(
    ledger: denpyo.Ledger,
) -> None:
    ledger.channel("charge", idempotent=True, idempotency_window=86400)(lambda sub: "ch_1")
    sub = ledger.submit("charge", "order:1", {"amount": 5})
    client = TestClient(create_app(ledger, token=TOKEN), base_url="http://127.0.0.1:8470")
    client.headers.update({"authorization": f"Bearer {TOKEN}"})
    page = client.get(f"/submissions/{sub.id}")
    assert page.status_code == 200
    assert "the provider forgets the key at" in page.text


def refusal(answer: Any, reason: str) -> None:
    """A 400 page as the dashboard's other refusals look: the reason, in its flash."""
    assert answer.status_code == 400, answer.text
    assert 'class="flash error"' in answer.text and reason in answer.text, answer.text


TOO_BIG = str(2**63)


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("/submissions?status=bogus", "unknown status &#39;bogus&#39;"),
        ("/submissions?since=0001-01-01", "&#39;0001-01-01&#39;"),
        ("/submissions?until=9999-12-31T23:59:59-05:00", "&#39;9999-12-31T23:59:59-05:00&#39;"),
        ("/submissions?since=1900-01-01", "out of range"),
        ("/submissions?since=nonsense", "cannot read &#39;nonsense&#39; as a time"),
        (f"/submissions?before={TOO_BIG}", f"not &#39;{TOO_BIG}&#39;"),
        ("/submissions?before=-1", "before must be a row id"),
        ("/submissions?before=ten", "before must be a row id"),
        ("/attention?before=-1", "before must be a row id"),
        (f"/attention?before={TOO_BIG}", "before must be a row id"),
        ("/partials/attention?before=1.5", "before must be a row id"),
    ],
)
def test_a_query_that_cannot_be_read_is_a_400_with_the_reason(
    web: TestClient, ids: dict[str, int], query: str, reason: str
) -> None:
    refusal(web.get(query), reason)


def test_the_largest_row_id_is_a_page_not_an_error(web: TestClient, ids: dict[str, int]) -> None:
    assert web.get(f"/submissions?before={2**63 - 1}").status_code == 200
    assert web.get(f"/attention?before={2**63 - 1}").status_code == 200


@pytest.mark.parametrize("bad", ["-1", "0", "seven", "1.5", TOO_BIG, "9" * 5000])
def test_a_bulk_naming_no_row_id_is_a_400_and_changes_nothing(
    web: TestClient, ledger: denpyo.Ledger, ids: dict[str, int], bad: str
) -> None:
    form = {"action": "abandon", "confirm": "yes", "note": "gone"}
    answer = web.post("/bulk", data={**form, "ids": [str(ids["rejected"]), bad]})
    refusal(answer, "a ticked row must be a row id")
    assert ledger.get_by_id(ids["rejected"]).resolution is None  # type: ignore[union-attr]


@pytest.mark.parametrize("depth", [50_000, 200])
def test_a_resend_payload_nested_too_deep_is_a_400(
    web: TestClient, ledger: denpyo.Ledger, ids: dict[str, int], depth: int
) -> None:
    answer = web.post(
        f"/submissions/{ids['rejected']}/resend",
        data={"note": "deep", "payload": "[" * depth + "]" * depth},
    )
    refusal(answer, "nested more than")
    assert ledger.store.find_superseding(ids["rejected"]) is None


def test_an_unreachable_database_is_a_503_not_a_400(tmp_path: Any) -> None:
    """Nothing listens at the database's address: the request was fine, the service
    is not, so 503 and the error page (never a 400 that blames the request)."""
    url = f"postgresql://denpyo@127.0.0.1:{free_port()}/nowhere?connect_timeout=2"
    with denpyo.Ledger(url) as ledger:
        client = TestClient(create_app(ledger, token=TOKEN), base_url="http://127.0.0.1:8470")
        client.headers.update({"authorization": f"Bearer {TOKEN}"})
        for path in ("/attention", "/submissions?status=failed", "/submissions/7"):
            answer = client.get(path)
            assert answer.status_code == 503, (path, answer.text)
            assert "the database did not answer" in answer.text
            assert answer.headers["retry-after"]


def test_a_channel_is_paused_and_resumed_from_the_overview(
    web: TestClient, ledger: denpyo.Ledger, ids: dict[str, int]
) -> None:
    """Each channel on the overview with its state and its one action (a note
    required), and its page with who changed it, when and why."""
    overview = web.get("/").text
    assert '<span class="badge m-active">active</span>' in overview
    assert 'action="/channels/sms/pause"' in overview
    assert 'action="/channels/invoice-email/pause"' in overview
    assert 'href="/channels/sms"' in overview

    missing = web.post("/channels/sms/pause", data={"note": "  "}, follow_redirects=False)
    assert missing.status_code == 409 and "a note (--note) is required" in missing.text
    assert 'class="flash error"' in missing.text and "Nothing was changed" in missing.text
    assert ledger.store.channel_history("sms") == []

    note = "carrier outage <script>alert(1)</script>"
    paused = web.post("/channels/sms/pause", data={"note": note}, follow_redirects=False)
    assert paused.status_code == 303 and paused.headers["location"] == "/channels/sms?done=paused"
    [state] = ledger.store.channel_states()
    assert (state.channel, state.paused_by, state.paused_note) == ("sms", "operator:script", note)
    page = web.get(paused.headers["location"]).text
    assert "Paused: workers stop starting its calls within one poll interval" in page
    assert 'action="/channels/sms/resume"' in page and "/channels/sms/pause" not in page
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)" in page
    assert re.search(r'badge k-paused">paused</span></td>\s*<td>operator:script</td>', page)
    overview = web.get("/").text
    assert '<tr class="stopped">' in overview and 'badge m-paused">paused' in overview
    assert 'action="/channels/sms/resume"' in overview and "operator:script" in overview
    assert "&lt;script&gt;alert(1)" in overview and "<script>alert(1)" not in overview

    again = web.post("/channels/sms/pause", data={"note": "me too"}, follow_redirects=False)
    assert again.headers["location"] == "/channels/sms?done=already-paused"
    assert "It was paused already: nothing was changed." in web.get(again.headers["location"]).text
    assert len(ledger.store.channel_history("sms")) == 1

    resumed = web.post("/channels/sms/resume", data={"note": "back"}, follow_redirects=False)
    assert resumed.headers["location"] == "/channels/sms?done=resumed"
    page = web.get("/channels/sms").text
    assert [m for m in re.findall(r'badge k-(\w+)"', page)] == ["resumed", "paused"]
    assert 'action="/channels/sms/pause"' in page
    assert [s.mode.value for s in ledger.store.channel_states()] == ["active"]
    not_paused = web.post("/channels/sms/resume", data={"note": "x"}, follow_redirects=False)
    assert not_paused.headers["location"] == "/channels/sms?done=not-paused"


def test_a_channel_the_application_does_not_register_is_refused(
    web: TestClient, ledger: denpyo.Ledger, ids: dict[str, int]
) -> None:
    unknown = web.post("/channels/emial/pause", data={"note": "x"}, follow_redirects=False)
    refusal = unknown.text
    assert unknown.status_code == 404 and "no channel named &#39;emial&#39;" in refusal
    assert "the application registers invoice-email, sms" in refusal
    assert web.get("/channels/emial").status_code == 404
    bad = web.post("/channels/bad%20name/pause", data={"note": "x"}, follow_redirects=False)
    assert bad.status_code == 400 and "channel name" in bad.text
    assert ledger.store.channel_states() == []


def test_a_channel_with_no_rows_may_be_paused_ahead_without_the_application(
    tmp_path: Any,
) -> None:
    """A dashboard over the database alone (no channels registered) takes any channel
    name, as `denpyo pause` does without --app."""
    with denpyo.Ledger(f"sqlite:///{tmp_path}/bare.db") as bare:
        bare.migrate()
        client = TestClient(create_app(bare, token=TOKEN), base_url="http://127.0.0.1:8470")
        client.headers.update({"authorization": f"Bearer {TOKEN}"})
        assert "No channels yet." in client.get("/").text
        done = client.post("/channels/launch/pause", data={"note": "not before Monday"})
        assert done.status_code == 200 and "Paused:" in done.text
        assert 'action="/channels/launch/resume"' in client.get("/").text
