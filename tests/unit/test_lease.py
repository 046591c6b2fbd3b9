"""A hold's own deadline, by this process's monotonic clock: may its call still start?

Leases are built with `since` in the past or the future, so that nothing here
waits or depends on how fast the test runs."""

import time

import pytest

import denpyo
from denpyo.domain.lease import MARGIN, Lease


def test_a_call_never_starts_in_the_last_tenth_of_its_lease() -> None:
    assert MARGIN == 0.1
    since = time.monotonic()
    assert Lease(10.0, since).deadline == since + 10.0 * (1 - MARGIN)


def test_left_counts_down_from_the_deadline_and_never_below_zero() -> None:
    running = Lease(60.0, since=time.monotonic() - 5)
    assert 0 < running.left() <= 60.0 * (1 - MARGIN) - 5
    assert Lease(60.0, since=time.monotonic() - 3600).left() == 0
    assert Lease(60.0, since=time.monotonic() + 3600).left() > 3600


def test_check_raises_once_the_call_may_no_longer_start() -> None:
    Lease(60.0).check()
    with pytest.raises(denpyo.LeaseExpired, match="c:k: the lease may have run out"):
        Lease(60.0, since=time.monotonic() - 3600).check("c:k")
    revoked = Lease(60.0)
    revoked.revoke()
    assert revoked.left() == 0
    with pytest.raises(denpyo.LeaseExpired, match="this row: "):
        revoked.check()


def test_a_renewal_extends_the_deadline_and_never_shortens_it() -> None:
    now = time.monotonic()
    lease = Lease(10.0, since=now - 3600)
    lease.renewed(now)
    assert lease.deadline == now + 9.0 and lease.left() > 0
    lease.renewed(now - 60)  # a renewal sent earlier, answered late
    assert lease.deadline == now + 9.0


def test_lease_begin_and_revoke_are_exclusive() -> None:
    started = Lease(10.0)
    started.begin()
    assert not started.revoke() and started.left() > 0
    revoked = Lease(10.0)
    assert revoked.revoke() and revoked.left() == 0
    with pytest.raises(denpyo.LeaseExpired):
        revoked.begin()
    expired = Lease(1.0, since=time.monotonic() - 0.95)  # in its last tenth
    with pytest.raises(denpyo.LeaseExpired):
        expired.begin()
    expired.renewed(time.monotonic())
    expired.begin()


def test_a_lease_past_its_deadline_may_still_be_revoked_if_its_call_never_began() -> None:
    """A worker shutting down gives back every row whose call has not begun."""
    late = Lease(10.0, since=time.monotonic() - 3600)
    with pytest.raises(denpyo.LeaseExpired):
        late.begin()
    assert not late.started and late.revoke() and late.revoked
    assert late.revoke()  # twice: still not started
