"""Whether a commit of the ledger survives the loss of its database server.

denpyo's promise rests on one commit: the `requesting` row (and the attempt's
start) is durable before the call leaves. On a replicated PostgreSQL that means
durable on the standby that would be promoted: with asynchronous replication the
last commits on a lost primary may never reach it, and after the failover the
call has gone out with no row to remember it. Pure: the store reads the server's
settings, `Durability.risk` judges them.
"""

from __future__ import annotations

from dataclasses import dataclass

WEAK_COMMITS = ("off", "local")
"""`synchronous_commit` values a commit is acknowledged under before a synchronous
standby has it (`off`: before it is on the primary's own disk)."""


@dataclass(frozen=True, slots=True)
class Durability:
    """What a PostgreSQL server says about its commits, as denpyo's sessions see it.

    `standbys`: physical standbys streaming from it now (logical replication,
    such as a change-data-capture consumer, is not a standby); `synchronous_names`:
    its `synchronous_standby_names` ("" when none is synchronous); `synchronous_commit`:
    the setting denpyo's own commits run under; `sync_standbys`: standbys the server
    reports in sync (None: this role may not see it, pg_read_all_stats)."""

    standbys: int
    synchronous_names: str
    synchronous_commit: str
    sync_standbys: int | None = None

    @property
    def risk(self) -> str | None:
        """Why a commit acknowledged to denpyo could still be lost, with the call it
        preceded already made (None: it cannot, as far as the server says)."""
        if self.synchronous_commit == "off":
            return (
                "synchronous_commit is off: a commit is acknowledged before it is on disk, "
                "so a crash can lose a slip whose call was made"
            )
        if self.standbys and not self.synchronous_names.strip():
            return (
                f"{_standbys(self.standbys)} streaming, none synchronous "
                "(synchronous_standby_names is empty): a failover can lose the last slips "
                "whose calls were made; `denpyo audit --adopt` repairs them afterwards"
            )
        if self.standbys and self.synchronous_commit in WEAK_COMMITS:
            return (
                f"synchronous_commit is {self.synchronous_commit}: commits do not wait for "
                "the synchronous standby, so a failover can lose the last slips"
            )
        return None

    def describe(self) -> str:
        """One line for `denpyo status`."""
        risk = self.risk
        if risk is not None:
            return f"at risk: {risk}"
        if self.synchronous_names.strip() and not (self.sync_standbys or self.standbys):
            return (
                f"synchronous_standby_names = {self.synchronous_names!r} but no standby is "
                "streaming: every commit waits for one"
            )
        if not self.standbys:
            return f"no standby streaming; synchronous_commit = {self.synchronous_commit}"
        return (
            f"{_standbys(self.standbys)}, synchronous ({self.synchronous_names}); "
            f"synchronous_commit = {self.synchronous_commit}"
        )


def _standbys(count: int) -> str:
    return f"{count} standby" if count == 1 else f"{count} standbys"
