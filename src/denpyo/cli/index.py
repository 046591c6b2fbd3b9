"""Every command of `denpyo`: the module that defines it, imported only when the
command runs (so that `denpyo --help`, and each command, load no more than they
need), and the sentence `denpyo --help` lists it by: the first of its help, which
tests/unit/test_cli_index.py checks against the command itself."""

COMMANDS: dict[str, tuple[str, str]] = {
    "action": (
        "action_log",
        "One action: who, why, its dry run, where it stands, and its rows with what "
        "happened to each (skipped: why).",
    ),
    "actions": (
        "action_log",
        "Every action by a person, newest first: who, when, what, why, on how many rows, "
        "and who approved it.",
    ),
    "approvals": (
        "action_log",
        "The requests waiting for a second person, oldest first: what each would do (its "
        "dry run), who asked and why.",
    ),
    "approve": (
        "action_log",
        "Approve another person's request: it is carried out now, and each row's history "
        "names you both.",
    ),
    "archive": (
        "keeping",
        "Write old settled rows and their history as Parquet (by channel and month), read"
        " the files back, and only then remove the rows, as `prune` does: their keys and "
        "counts stay, and `show` says where each went.",
    ),
    "audit": (
        "audit",
        "Compare the ledger with the provider's own records (the channel's list_remote) "
        "and list each discrepancy with its row: accepted by the provider but not synced,"
        " synced but unknown to the provider, different remote ids, a key accepted twice.",
    ),
    "bulk": (
        "action_log",
        "Retry, abandon or resend every row a filter finds: a dry run over the whole set,"
        " the set frozen as its ids, then batches with progress, which can be paused, "
        "continued and cancelled from here or the dashboard.",
    ),
    "dashboard": (
        "commands",
        "Serve the dashboard: counts, the needs-a-person queue, each row's history, and "
        "retry / abandon / resend / mark synced with your name and a note.",
    ),
    "decline": (
        "action_log",
        "Decline another person's request, with a note: nothing is done.",
    ),
    "demo": (
        "demo",
        "The invoice-email story in a few seconds, on SQLite with a fake provider (no services).",
    ),
    "forget": (
        "forgetting",
        "Erase the payloads of a call (CHANNEL:KEY, with its resends) or of a person "
        "(--where), live and archived, and keep the slip: status, attempts, times, ids, "
        "remote id and history stay, so the key is never sent again and the counts do not"
        " change.",
    ),
    "list": (
        "rows",
        "Submissions matching the filters, newest first.",
    ),
    "migrate": (
        "commands",
        "Create or upgrade the denpyo tables (safe to run twice, or from two hosts).",
    ),
    "pause": (
        "actions",
        "Stop the calls of CHANNEL until `denpyo resume`: every worker stops starting "
        "them within one poll interval (1 s by default).",
    ),
    "prune": (
        "keeping",
        "Remove settled rows once they are old enough, each state after its own age: "
        "synced rows, and rejected or failed rows a person resolved (abandoned or "
        "resent).",
    ),
    "reconcile": (
        "actions",
        "One pass over the rows in doubt: ask the provider (verify), then sync, resend "
        "(never arrived) or hold for a person.",
    ),
    "report": (
        "keeping",
        "How many calls were recorded per period, channel and status, for as long as the "
        "ledger exists: live rows where they stand, removed ones where they stood when "
        "they went (the same before and after a prune).",
    ),
    "resolve": (
        "actions",
        "A person's decision on one row, written to its history with --note and who.",
    ),
    "resume": (
        "actions",
        "Let the workers start the calls of a paused CHANNEL again, within one poll "
        "interval (1 s by default).",
    ),
    "retry": (
        "actions",
        "Make failed rows due now; a worker sends them again under the same key.",
    ),
    "rotate-key": (
        "payload_keys",
        "Re-encrypt with the first key of DENPYO_PAYLOAD_KEYS (or of --app's ledger) "
        "every payload sealed with another key, and every payload still in clear (turning"
        " encryption on, this encrypts the rows written before).",
    ),
    "show": (
        "rows",
        "One submission and its history, oldest event first.",
    ),
    "sql": (
        "commands",
        "Print the schema as SQL, for those who run their own migrations (Alembic, Django).",
    ),
    "status": (
        "status",
        "Counts by channel and status; in doubt, exhausted, and the oldest pending row.",
    ),
    "users": (
        "people",
        "The people who may sign in to the dashboard, each with a role and a token of "
        "their own (`denpyo dashboard --users FILE`).",
    ),
    "webhooks": (
        "webhooks",
        "Serve the providers' webhooks: each signed event settles the row it names (a row"
        " in doubt becomes synced), adds to a synced row's history, or is kept for the "
        "audit.",
    ),
    "worker": (
        "actions",
        "Send, retry and reconcile until SIGINT or SIGTERM; then stop claiming, give back"
        " rows not yet started, let the calls in flight finish (up to --grace seconds), "
        "and exit 0.",
    ),
}
