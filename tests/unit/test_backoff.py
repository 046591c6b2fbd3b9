"""Exponential back-off with jitter, and a provider's Retry-After as a floor."""

import random

import pytest

from denpyo import Backoff
from denpyo.errors import ConfigurationError

NO_JITTER = Backoff(initial=2.0, maximum=100.0, jitter=0.0)


def test_backoff_grows_exponentially_and_caps() -> None:
    delays = [NO_JITTER.delay(n) for n in range(1, 9)]
    assert delays == [2, 4, 8, 16, 32, 64, 100, 100]


def test_backoff_jitter_stays_within_range() -> None:
    backoff = Backoff(initial=10, maximum=10, jitter=0.5)
    rng = random.Random(1)
    draws = [backoff.delay(1, rng=rng) for _ in range(200)]
    assert all(5 <= d <= 10 for d in draws)
    assert len(set(draws)) > 100


def test_waits_counted_from_time_grow_as_the_back_off_does() -> None:
    """A question left unanswered: each wait run in full adds to what has elapsed, so the
    next is `multiplier` times longer, capped, as `delay` after 1, 2, 3… tries."""
    elapsed, waits = 0.0, []
    for _ in range(8):
        waits.append(NO_JITTER.delay_after(elapsed))
        elapsed += waits[-1]
    assert waits == [NO_JITTER.delay(n) for n in range(1, 9)] == [2, 4, 8, 16, 32, 64, 100, 100]
    jittered = Backoff(initial=10, maximum=1000, jitter=0.5)
    rng = random.Random(1)
    assert all(10 <= jittered.delay_after(10, rng=rng) <= 20 for _ in range(100))


def test_retry_after_is_a_floor_within_maximum() -> None:
    assert NO_JITTER.delay(1, retry_after=30) == 30
    assert NO_JITTER.delay(1, retry_after=10_000) == 100
    # Never shorter than the back-off: Retry-After 0 or 1 does not speed up retries.
    assert NO_JITTER.delay(4, retry_after=0) == NO_JITTER.delay(4)
    assert NO_JITTER.delay(4, retry_after=1) == NO_JITTER.delay(4) > 1


@pytest.mark.parametrize("bad", [dict(initial=-1), dict(initial=5, maximum=1), dict(jitter=2)])
def test_backoff_rejects_nonsense(bad: dict[str, float]) -> None:
    with pytest.raises(ConfigurationError):
        Backoff(**bad)


@pytest.mark.parametrize("bad", [dict(multiplier=0.5), dict(jitter=-0.1), dict(maximum=-1)])
def test_backoff_rejects_a_shrinking_multiplier_and_jitter_below_zero(
    bad: dict[str, float],
) -> None:
    with pytest.raises(ConfigurationError, match="Backoff"):
        Backoff(**bad)


def test_jitter_takes_at_most_its_share_of_the_delay() -> None:
    """0.5: between half the delay and all of it; 1: anything up to it; 0: all of it."""
    for jitter in (0.0, 0.25, 1.0):
        backoff = Backoff(initial=8.0, maximum=8.0, jitter=jitter)
        draws = [backoff.delay(1, rng=random.Random(seed)) for seed in range(100)]
        assert all(8.0 * (1 - jitter) <= d <= 8.0 for d in draws), jitter


def test_the_same_seed_draws_the_same_delays() -> None:
    backoff = Backoff(initial=1.0, maximum=60.0)
    first = [backoff.delay(n, rng=random.Random(7)) for n in range(1, 8)]
    assert first == [backoff.delay(n, rng=random.Random(7)) for n in range(1, 8)]


def test_no_attempt_yet_waits_the_initial_delay_and_many_attempts_stay_at_the_maximum() -> None:
    assert NO_JITTER.delay(0) == NO_JITTER.delay(1) == 2.0
    assert NO_JITTER.delay(10_000) == 100.0  # no overflow: the exponent is bounded
    assert Backoff(initial=0.0, maximum=0.0).delay(3) == 0.0  # retries due at once
