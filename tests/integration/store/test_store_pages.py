"""The dashboard's reads: pages of the list, the search by key, the
needs-a-person queue and outcomes per minute find what they should, from their
indexes."""

from __future__ import annotations

from store_helpers import AMBIGUOUS, EXHAUSTED, REJECTED, RETRYING, SYNCED, new, plans, settled

from conftest import under_the_profile
from denpyo import Status
from denpyo.domain.filters import Filter
from denpyo.domain.moves import Move
from denpyo.store import Store


def test_list_pages_walk_every_match_once_in_bounded_windows(store: Store) -> None:
    ids = [store.record(new(f"k{i:02}", "c" if i % 3 else "d"), actor="t")[0].id for i in range(30)]
    first = store.list_page(Filter(limit=10))
    assert [s.id for s in first.rows] == ids[::-1][:10] and first.older == ids[20]

    # A filter over windows of 4 ids: pages may be short, and together hold every match.
    seen: list[int] = []
    before: int | None = None
    pages = 0
    while True:
        page = store.list_page(Filter(channel="d", limit=3), before=before, window=4)
        assert len(page.rows) <= 3 and all(s.channel == "d" for s in page.rows)
        seen += [s.id for s in page.rows]
        pages += 1
        if page.older is None:
            break
        assert isinstance(page.older, int) and page.older < (before or ids[-1] + 1)
        before = page.older
    assert seen == [i for n, i in enumerate(ids) if n % 3 == 0][::-1]
    assert pages >= 30 // 4
    assert store.list_page(Filter(statuses=(Status.SYNCED,))).rows == []


def test_search_finds_keys_by_prefix_in_key_order(store: Store) -> None:
    for key in ["order:2", "order:10", "order:1", "order:1~resend1", "orders", "other:1"]:
        store.record(new(key), actor="t")
    store.record(new("order:1", channel="d"), actor="t")
    found = store.search_keys("c", "order:1")
    assert [s.key for s in found.rows] == ["order:1", "order:10", "order:1~resend1"]
    assert found.older is None and all(s.channel == "c" for s in found.rows)
    first = store.search_keys("c", "order:", limit=2)
    assert [s.key for s in first.rows] == ["order:1", "order:10"] and first.older == "order:10"
    rest = store.search_keys("c", "order:", after="order:10", limit=2)
    assert [s.key for s in rest.rows] == ["order:1~resend1", "order:2"]
    assert store.search_keys("c", "nothing").rows == []
    assert store.channels() == ["c", "d"]


def test_the_attention_queue_holds_exactly_what_needs_a_person(store: Store) -> None:
    rejected = settled(store, "rejected", REJECTED)
    exhausted = settled(store, "exhausted", EXHAUSTED)
    ambiguous = settled(store, "ambiguous", AMBIGUOUS)
    expired, _ = store.record(new("expired"), actor="h", lease=60)
    [expired_now] = store.move([Move.still_in_doubt(expired, "h", 0, "lease run out")])
    settled(store, "synced", SYNCED)
    settled(store, "retrying", RETRYING)
    store.record(new("waiting"), actor="t")
    store.record(new("in-flight"), actor="h", lease=60)
    resolved = settled(store, "resolved", REJECTED)
    store.move([Move.give_up(resolved, "op", "abandon", "abandoned", "nobody wants it")])

    queue = store.attention_page()
    wanted = [expired.id, ambiguous.id, exhausted.id, rejected.id]
    assert [s.id for s in queue.rows] == wanted and queue.older is None
    assert [s.in_doubt for s in queue.rows] == [True, True, False, False]
    assert expired_now is not None and expired_now.in_doubt
    first = store.attention_page(limit=3)
    assert [s.id for s in first.rows] == wanted[:3] and first.older == wanted[2]
    rest = store.attention_page(before=wanted[2], limit=3)
    assert [s.id for s in rest.rows] == wanted[3:] and rest.older is None
    assert store.count_attention()["needs_person"] == len(wanted)


def test_outcomes_are_folded_once_per_minute(store: Store) -> None:
    for i in range(3):
        settled(store, f"s{i}", SYNCED)
    settled(store, "f", RETRYING)
    settled(store, "r", REJECTED, channel="d")
    assert store.fold_outcomes(lag=0) > 0
    assert store.fold_outcomes(lag=0) == 0  # nothing new: nothing counted twice

    def totals(channel: str | None = None) -> dict[str, int]:
        found: dict[str, int] = {}
        for minute, outcome, n in store.outcomes_per_minute(channel=channel):
            assert minute.second == 0 and minute.tzinfo is not None
            found[outcome] = found.get(outcome, 0) + n
        return found

    assert totals() == {"sent": 5, "synced": 3, "failed": 1, "rejected": 1}
    assert totals("d") == {"sent": 1, "rejected": 1}
    settled(store, "later", SYNCED)
    assert store.fold_outcomes(lag=3600) == 0  # younger than the lag: left for later
    store.upkeep()  # the workers' heartbeat folds with the default lag of 10 s
    assert totals()["synced"] == 3
    store.fold_outcomes(lag=0)
    assert totals()["synced"] == 4


DASHBOARD_INDEXES = {
    "sqlite": {
        "list_submission_needs_person_page": [
            "denpyo_submissions_attention",
            "denpyo_submissions_in_doubt",
        ],
        "count_submissions_needs_person": [
            "denpyo_submissions_ready",
            "denpyo_submissions_in_doubt",
        ],
        "search_submissions": ["sqlite_autoindex_denpyo_submissions_1"],
        "find_submission_next_channel": ["sqlite_autoindex_denpyo_submissions_1"],
    },
    "postgresql": {
        "list_submission_needs_person_page": [
            "denpyo_submissions_attention",
            "denpyo_submissions_in_doubt",
        ],
        "count_submissions_needs_person": [
            "denpyo_submissions_ready",
            "denpyo_submissions_in_doubt",
        ],
        "search_submissions": ["denpyo_submissions_channel_key"],
        "find_submission_next_channel": ["denpyo_submissions_channel_key"],
        "list_submission_page": ["denpyo_submissions_pkey"],
    },
    "mysql": {
        "list_submission_needs_person_page": [
            "denpyo_submissions_attention",
            "denpyo_submissions_status_created",
        ],
        "count_submissions_needs_person": [
            "denpyo_submissions_status_created",
            "denpyo_submissions_due",
        ],
        "search_submissions": ["denpyo_submissions_channel_key"],
        "find_submission_next_channel": ["denpyo_submissions_channel_key"],
        "list_submission_page": ["PRIMARY"],
    },
}


def test_the_dashboards_reads_are_planned_on_their_indexes(
    store: Store, backend: str, db_url: str
) -> None:
    """The queue reads only its two small indexes, the counts of what needs a person
    (besides the running counts) the indexes of the rows waiting or in flight, the search
    the unique index on (channel, key), a page of the list a range of the primary key."""
    from denpyo.store.params import filter_params

    params = {
        **filter_params(Filter(channel="c", statuses=(Status.FAILED,))),
        "before": 1000,
        "floor": 0,
        "channel": "c",
        "prefix": "order:",
        "after": None,
        "scan": 150,
        "limit": 51,
        "channels": ["c", "d"],
    }
    with plans(store, backend, db_url) as plan:
        for name, indexes in DASHBOARD_INDEXES[backend].items():
            if name == "count_submissions_needs_person" and under_the_profile(backend):
                continue  # the distributed profile counts the rows (no running counts)
            given = {**params, "after": ""} if name == "find_submission_next_channel" else params
            found = plan(name, given)
            for index in indexes:
                assert index in found, (name, index, found)
