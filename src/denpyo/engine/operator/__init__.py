"""What the people on call do, as library calls: the CLI and the dashboard are thin
layers over these functions. Nothing here prints.

Every change is a `Move` (compare-and-set) applied by `Store.move`, so each one
writes an event naming the person (``operator:<name>``: `by`, else the login
name) with their note, and a row that moved meanwhile is left alone
(`LeaseLost`, nothing written). Input is checked before anything is written; a
refusal is an `InvalidInput` (unknown reference, missing note, "in doubt: not
without force") or a `TransitionNotAllowed` (no move between statuses allows it).
Whether a row allows an action is `denpyo.domain.rules.allowed_actions`, which
the dashboard and `denpyo show` read too: they offer only what is accepted here.

What each action does, by the row it meets. A row being sent right now (a live
lease) is never touched; a row a person resolved is not retried.

- **retry** a ``failed`` row: it is due now, under the same idempotency key; its
  error stays. An ambiguous (in-doubt) ``failed`` row only with
  ``force_in_doubt`` and a note: its `error_kind` becomes ``transient``, so it
  is resent instead of verified (a double effect if the first call arrived and
  the provider ignores idempotency keys). An in-doubt ``requesting`` row (lease
  run out), likewise forced: ``requesting → requesting`` with the lock cleared
  and due now, which the claim query reads as "never attempted": a worker sends
  it again. ``rejected`` and ``synced`` rows: `TransitionNotAllowed`.
- **abandon** (note required): ``failed``/``rejected`` keep their status, get the
  `resolution` and lose any next attempt (a person's resolution keeps the
  status). A ``requesting`` row not in flight becomes ``failed`` with no
  next attempt: `error_kind` ``ambiguous`` if it was ever attempted (it may have
  arrived, and stays counted in doubt, but no longer needs a person), else
  ``transient`` ("never sent").
- **resend** (note required, payload optional): a NEW submission, key
  ``<key>~resend<n>``, a new idempotency key, ``supersedes`` = the old id, waiting
  for a worker; the old row is resolved "resent as #<new id>" as by abandon.
  Both in one transaction. In-doubt rows only with ``force_in_doubt``; a row
  resent once is refused.
- **mark synced** (remote id and note required): ``failed`` or an attempted,
  not in-flight ``requesting`` row → ``synced`` with the provider's id. From
  ``rejected`` there is no such move: `TransitionNotAllowed`.
- **prune**, **archive** (`_keeping.py`): rows retention lets go leave the
  table, logged with who ran it, the ages and how many; a dry run counts them.
- **forget** (note required; `Ledger.forget`, engine/forgetting.py): the payloads
  of a call's rows, or of every row whose payload names a person, erased, live
  and archived; no status moves, and a forgotten row takes no retry, resend nor
  mark synced again. Pause and resume a channel: `Ledger.pause`, `Ledger.resume`.
"""

from denpyo.domain.rules import label
from denpyo.engine.acting import (
    BATCH,
    LEASE,
    MAX_NOTE_LENGTH,
    check_note,
    find,
    operator_actor,
)
from denpyo.engine.audit import Progress
from denpyo.engine.forgetting import ForgetResult
from denpyo.engine.operator._act import (
    SAME_PAYLOAD,
    Resolution,
    RetryResult,
    resolve_abandon,
    resolve_mark_synced,
    resolve_resend,
    retry,
)
from denpyo.engine.operator._actions import (
    DryRun,
    Requested,
    act,
    action_detail,
    action_json,
    action_log,
    actions_csv,
    approve,
    cancel_action,
    carry_out,
    confirm_bulk,
    decide,
    decline,
    pause_action,
    plan_bulk,
    resume_action,
    will,
)
from denpyo.engine.operator._channels import (
    ChannelView,
    channel_states,
    channel_view,
)
from denpyo.engine.operator._keeping import Keeping, archive, prune, removable_counts
from denpyo.engine.operator._read import (
    PREVIEW_CHARS,
    History,
    StatusReport,
    attention,
    attention_counts,
    channel_event_json,
    channel_state_json,
    channels_with_rows,
    check_channel,
    clip_text,
    clip_value,
    event_json,
    forgotten,
    history,
    list_submissions,
    make_filter,
    outcomes,
    page,
    replaced,
    search,
    status,
    status_counts,
    submission_json,
)
from denpyo.engine.operator._run import (
    ReconcileSummary,
    audit,
    reconcile,
    require_channels,
    serve,
)
from denpyo.errors import SubmissionNotFound
from denpyo.store.base import Page

__all__ = [
    "BATCH",
    "LEASE",
    "MAX_NOTE_LENGTH",
    "PREVIEW_CHARS",
    "SAME_PAYLOAD",
    "ChannelView",
    "DryRun",
    "ForgetResult",
    "History",
    "Keeping",
    "Page",
    "Progress",
    "ReconcileSummary",
    "Requested",
    "Resolution",
    "RetryResult",
    "StatusReport",
    "SubmissionNotFound",
    "act",
    "action_detail",
    "action_json",
    "action_log",
    "actions_csv",
    "approve",
    "archive",
    "attention",
    "attention_counts",
    "audit",
    "cancel_action",
    "carry_out",
    "channel_event_json",
    "channel_state_json",
    "channel_states",
    "channel_view",
    "channels_with_rows",
    "check_channel",
    "check_note",
    "clip_text",
    "clip_value",
    "confirm_bulk",
    "decide",
    "decline",
    "event_json",
    "find",
    "forgotten",
    "history",
    "label",
    "list_submissions",
    "make_filter",
    "operator_actor",
    "outcomes",
    "page",
    "pause_action",
    "plan_bulk",
    "prune",
    "reconcile",
    "removable_counts",
    "replaced",
    "require_channels",
    "resolve_abandon",
    "resolve_mark_synced",
    "resolve_resend",
    "resume_action",
    "retry",
    "search",
    "serve",
    "status",
    "status_counts",
    "submission_json",
    "will",
]
