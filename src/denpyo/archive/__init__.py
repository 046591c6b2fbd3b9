"""Old rows and their history as Parquet files, read back before the database lets go.

`denpyo archive` moves old rows out of the database: it writes them here, reads
back what it wrote (`Archive.verify`), and only then deletes them. This module is
the file side alone; it never touches the database.

The layout is Hive-style, so that DuckDB, pyarrow, Spark or Athena read `channel`
and `month` from the folder names and skip the folders a query does not need::

    <target>/submissions/channel=<channel>/month=<YYYY-MM>/<batch>.parquet
    <target>/events/channel=<channel>/month=<YYYY-MM>/<batch>.parquet

The month is the row's `created_at` in UTC, and an event goes where its row goes,
so a row and its whole history share a partition. A channel name is
percent-escaped in its folder name (`billing:eu` → `channel=billing%3Aeu`), which
Hive-partitioning readers decode. Each run writes one file per table, channel and
month, named by its batch id: runs never overwrite each other, and a rerun of the
same batch (after a crash before the delete) replaces its own files instead of
adding the rows twice.

The columns are those of `denpyo_submissions` and `denpyo_events`
(docs/reference/tables.md): ids as int64, counters as int32 (the tables' types),
times as UTC timestamps, the payload as its compact JSON text in `payload`,
statuses and error kinds as their text. An events file has no `channel`: read with
Hive partitioning, both tables get `channel` and `month` from the folders.

Targets:

- a folder: a path, relative or absolute, or `file:///absolute/path`. Each file is
  written under a temporary name, flushed to disk and renamed into place, so that
  neither a reader nor a crash sees half a file.
- S3 or an S3-compatible store: `s3://bucket/prefix`. Credentials, endpoint and
  region come from the standard AWS environment (`AWS_ACCESS_KEY_ID`,
  `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_ENDPOINT_URL` or
  `AWS_ENDPOINT_URL_S3`, `AWS_REGION` / `AWS_DEFAULT_REGION`, the `~/.aws` files).
  The URL may add `region=`, `endpoint_override=host:port` and `scheme=http|https`,
  as in `s3://bucket/prefix?endpoint_override=127.0.0.1:9000&scheme=http` (MinIO on
  this machine). With neither an endpoint nor `region=`, the bucket's region is
  asked of AWS first. Credentials in the URL are refused: a command line shows in process
  lists and stays in shell histories. An object appears whole when its upload
  completes, so no rename is needed there.

S3 goes through `pyarrow.fs.S3FileSystem`, which ships in the pyarrow wheel, rather
than s3fs/fsspec: one dependency fewer (and no aiobotocore pinning botocore), it
reads the same AWS environment, and it writes Parquet without a Python file layer.

Forgetting (`denpyo forget`): `rows` and `rows_of` read the archived copies of rows
(a row may have more than one: see engine/archiving.py), and `forget` rewrites each
file that holds one of them, whole, with its payload `null`, its last error empty
and the texts that may quote it (its events' details, its resolution) replaced
whole by `[forgotten]`: written as any file is (under a temporary name, then
renamed; on S3 a new object), and read back as `verify` reads a batch before
anything else is done. The archive keeps no manifest or checksum of its own beside
the files.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from denpyo.archive.targets import parse_target, reason, redact, shown
from denpyo.domain.forgetting import replaced
from denpyo.domain.sealed import SEALED
from denpyo.domain.submission import Event, Submission
from denpyo.errors import ArchiveError, InvalidInput
from denpyo.extras import missing
from denpyo.store.sealing import CLEAR, Sealing

SUBMISSION_COLUMNS: tuple[tuple[str, str, bool], ...] = (
    ("id", "int64", False),
    ("channel", "string", False),
    ("key", "string", False),
    ("idempotency_key", "string", False),
    ("payload", "string", False),
    ("status", "string", False),
    ("attempts", "int32", False),
    ("next_attempt_at", "timestamp", True),
    ("locked_by", "string", True),
    ("locked_until", "timestamp", True),
    ("remote_id", "string", True),
    ("last_error", "string", True),
    ("error_kind", "string", True),
    ("ordering_key", "string", True),
    ("created_at", "timestamp", False),
    ("updated_at", "timestamp", False),
    ("synced_at", "timestamp", True),
    ("resolution", "string", True),
    ("supersedes", "int64", True),
)
"""`denpyo_submissions`' columns in order: name, Arrow type, whether it may be null."""

EVENT_COLUMNS: tuple[tuple[str, str, bool], ...] = (
    ("id", "int64", False),
    ("submission_id", "int64", False),
    ("at", "timestamp", False),
    ("kind", "string", False),
    ("from_status", "string", True),
    ("to_status", "string", True),
    ("attempt", "int32", False),
    ("actor", "string", False),
    ("detail", "string", True),
    ("duration_ms", "int32", True),
)
"""`denpyo_events`' columns, as `SUBMISSION_COLUMNS`."""

_BATCH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


@dataclass(frozen=True, slots=True)
class WrittenFile:
    """One file `Archive.write` wrote."""

    table: str
    """`submissions` or `events`."""
    path: str
    """Under the target: `submissions/channel=c/month=2026-01/<batch>.parquet`."""
    rows: int
    size: int
    """Bytes."""
    ids: tuple[int, ...] = field(repr=False)
    """The ids written, sorted, for `verify` to compare."""


@dataclass(frozen=True, slots=True)
class Written:
    """What one `Archive.write` wrote: the input of `Archive.verify`."""

    batch: str
    files: tuple[WrittenFile, ...]

    @property
    def rows(self) -> int:
        """Submissions written."""
        return sum(f.rows for f in self.files if f.table == "submissions")

    @property
    def events(self) -> int:
        """Events written."""
        return sum(f.rows for f in self.files if f.table == "events")

    @property
    def size(self) -> int:
        """Bytes written, all files."""
        return sum(f.size for f in self.files)


@dataclass(frozen=True, slots=True)
class ArchivedRow:
    """One archived copy of a row, as `Archive.rows` reads it: enough to match its
    payload and to find its file again."""

    id: int
    channel: str
    key: str
    payload: Any
    path: str
    """Its file, under the target: `submissions/channel=c/month=2026-01/<batch>.parquet`."""


class Archive:
    """A folder or an S3 prefix that archived rows are written to (module docstring).

    `str(archive)` is the target as shown to people, without secrets.
    """

    def __init__(self, url: str | os.PathLike[str]) -> None:
        try:
            import pyarrow as pa
            import pyarrow.fs as pafs
            import pyarrow.parquet as pq
        except ImportError as exc:
            raise missing("archive", "denpyo archive", exc) from exc
        self._pa: Any = pa
        self._pq: Any = pq
        self._pafs: Any = pafs
        target, self._local = parse_target(os.fspath(url) if isinstance(url, os.PathLike) else url)
        self._fs: Any
        if self._local:
            self._fs, self._root = pafs.LocalFileSystem(), target
            self.where = target
        else:
            quoted = shown(target)
            try:  # from_uri, not S3FileSystem(): only it reads AWS_ENDPOINT_URL(_S3)
                self._fs, root = pafs.FileSystem.from_uri(target)
            except (ValueError, TypeError) as exc:
                raise InvalidInput(f"archive URL {quoted} is malformed: {reason(exc)}") from None
            except OSError as exc:
                raise ArchiveError(f"cannot reach {quoted}: {reason(exc)}") from None
            self._root = root.rstrip("/")
            query = urlsplit(target).query
            self.where = redact(f"s3://{self._root}" + (f"?{query}" if query else ""))
        kinds = {
            "int64": pa.int64(),
            "int32": pa.int32(),
            "string": pa.string(),
            "timestamp": pa.timestamp("us", tz="UTC"),
        }
        self._schemas: dict[str, Any] = {
            table: pa.schema([pa.field(n, kinds[k], nullable=null) for n, k, null in columns])
            for table, columns in (("submissions", SUBMISSION_COLUMNS), ("events", EVENT_COLUMNS))
        }

    def __str__(self) -> str:
        return self.where

    def __repr__(self) -> str:
        return f"Archive({self.where!r})"

    def check_writable(self) -> None:
        """Write and delete a small probe object, so that a target that cannot take the
        archive (missing, read-only, a file where a folder should be, no such bucket,
        refused credentials) fails before any row is selected or written.

        On S3, deleting the probe from an empty prefix leaves the prefix's empty
        folder marker (`prefix/`, as the S3 console makes): pyarrow keeps the
        "folder" it wrote into. No reader takes it for a Parquet file."""
        probe = f"{self._root}/_denpyo-probe-{uuid.uuid4().hex}"
        try:
            if self._local:
                self._fs.create_dir(self._root, recursive=True)
            with self._fs.open_output_stream(probe) as out:
                out.write(b"denpyo archive: can write here\n")
            self._fs.delete_file(probe)
        except (OSError, self._pa.ArrowException) as exc:
            raise ArchiveError(f"cannot write to {self.where}: {reason(exc)}") from None

    def write(self, rows: Sequence[Submission], events: Sequence[Event], *, batch: str) -> Written:
        """Write `rows` and their `events` (no event of another row) as one file per
        table, channel and month, named `<batch>.parquet`.

        Raises InvalidInput, before writing anything, for a batch id that is not a
        plain name or rows that cannot be placed; ArchiveError when the target refuses
        a file (those written before it stay: a rerun of the batch replaces them).
        """
        if not isinstance(batch, str) or not _BATCH.match(batch):
            raise InvalidInput(
                f"batch id {batch!r} must be 1-128 letters, digits, '_', '.' or '-', "
                "starting with a letter or digit"
            )
        place: dict[int, tuple[str, str]] = {}
        for row in rows:
            if row.created_at is None:
                raise InvalidInput(f"submission #{row.id} has no created_at: no month to file it")
            place[row.id] = (row.channel, _month(row.created_at))
        if len(place) != len(rows):
            raise InvalidInput("a submission is given twice")
        try:
            event_places = [place[event.submission_id] for event in events]
        except KeyError as exc:
            raise InvalidInput(
                f"an event belongs to submission #{exc.args[0]}, which is not among the rows"
            ) from None
        parts = (
            ("submissions", rows, [place[row.id] for row in rows]),
            ("events", events, event_places),
        )
        tables = [(name, items, places, self._table(name, items)) for name, items, places in parts]
        files: list[WrittenFile] = []
        for name, items, places, table in tables:
            item_ids = [item.id for item in items]
            for (channel, month), indices in _groups(places).items():
                indices.sort(key=item_ids.__getitem__)
                path = f"{name}/channel={quote(channel, safe='')}/month={month}/{batch}.parquet"
                size = self._put(path, table.take(indices))
                ids = tuple(item_ids[i] for i in indices)
                files.append(WrittenFile(name, path, len(indices), size, ids))
        return Written(batch, tuple(files))

    def verify(self, written: Written) -> None:
        """Read back every file in `written`, whole: each must have the archive's
        columns and hold exactly the ids written. Raises ArchiveError at the first
        file that cannot be read or differs; only after this returns may the
        database delete the rows."""
        for file in written.files:
            path = f"{self.where}/{file.path}"
            try:
                with self._fs.open_input_file(f"{self._root}/{file.path}") as source:
                    table = self._pq.ParquetFile(source).read()
            except (OSError, self._pa.ArrowException) as exc:
                raise ArchiveError(f"cannot read back {path}: {reason(exc)}") from None
            if not table.schema.equals(self._schemas[file.table]):
                raise ArchiveError(f"{path} does not have the columns of {file.table}")
            if table.num_rows != file.rows:
                raise ArchiveError(
                    f"{path} holds {table.num_rows} rows where {file.rows} were written"
                )
            if sorted(table.column("id").to_pylist()) != list(file.ids):
                raise ArchiveError(f"{path} does not hold the ids that were written")

    def payload_of(self, sub: Submission, sealing: Sealing = CLEAR) -> Any:
        """The payload an archived row had: read from its channel's and month's files
        (a person resending it as a new row), opened with `sealing` (the ledger's keys)
        where it was archived encrypted. ArchiveError when it is not there."""
        if sub.created_at is None:
            raise ArchiveError(f"submission #{sub.id} has no created_at: no month to look in")
        folder = f"submissions/channel={quote(sub.channel, safe='')}/month={_month(sub.created_at)}"
        try:
            table = self._pq.read_table(
                f"{self._root}/{folder}",
                filesystem=self._fs,
                columns=["payload"],
                filters=[("id", "=", sub.id)],
                partitioning=None,
            )
        except (OSError, self._pa.ArrowException) as exc:
            raise ArchiveError(f"cannot read {self.where}/{folder}: {reason(exc)}") from None
        found = table.column("payload").to_pylist()
        if not found:
            raise ArchiveError(f"submission #{sub.id} is not in {self.where}/{folder}")
        return sealing.open_value(json.loads(found[-1]), sub.channel, sub.key)

    def rows(self, channel: str | None = None, *, containing: str = "") -> Iterator[ArchivedRow]:
        """Every archived copy of a row (of `channel`), file by file, its payload as the
        archive keeps it (encrypted where the table is); with `containing`, only those
        whose payload's JSON text contains it, or is encrypted (a cheap first sieve
        before each payload is decoded)."""
        folder = "submissions" if channel is None else f"submissions/{_channel_folder(channel)}"
        for path in self._files(folder):
            yield from self._copies(path, containing=containing)

    def rows_of(self, subs: Sequence[Submission]) -> list[ArchivedRow]:
        """The archived copies of these rows, read from their channels' and months' files."""
        wanted = {sub.id for sub in subs}
        folders = sorted({_folder(sub) for sub in subs})
        return [
            copy
            for folder in folders
            for path in self._files(f"submissions/{folder}")
            for copy in self._copies(path, ids=wanted)
        ]

    def forget(self, copies: Sequence[ArchivedRow]) -> int:
        """Rewrite every file of these copies' folders that holds one of their rows (or
        events): payload `null`, last error empty, resolution and event details
        replaced whole by `[forgotten]` (`replaced`). Each file is written whole under
        its own name and read back before the next. Returns how many files were
        rewritten; ArchiveError at the first that cannot be."""
        ids = {copy.id for copy in copies}
        folders = sorted({copy.path.rpartition("/")[0].partition("/")[2] for copy in copies})
        rewritten = 0
        for folder in folders:
            for table, column in (("submissions", "id"), ("events", "submission_id")):
                for path in self._files(f"{table}/{folder}"):
                    rewritten += self._forget_in(table, path, column, ids)
        return rewritten

    def _forget_in(self, table: str, path: str, column: str, ids: set[int]) -> int:
        """One file, rewritten if it holds one of `ids` (1), else left alone (0)."""
        pa = self._pa
        data = self._read(path)
        hit = [value in ids for value in data.column(column).to_pylist()]
        if not any(hit):
            return 0
        if table == "submissions":
            changes: dict[str, Callable[[Any], Any]] = {
                "payload": lambda value: "null",
                "last_error": lambda value: None,
                "resolution": replaced,
            }
        else:
            changes = {"detail": replaced}
        for name, change in changes.items():
            index = data.schema.get_field_index(name)
            values = [
                change(value) if forgotten else value
                for value, forgotten in zip(data.column(name).to_pylist(), hit, strict=True)
            ]
            data = data.set_column(index, data.schema.field(name), pa.array(values, pa.string()))
        size = self._put(path, data)
        ids_in = tuple(sorted(data.column("id").to_pylist()))
        self.verify(Written("forget", (WrittenFile(table, path, data.num_rows, size, ids_in),)))
        return 1

    def _files(self, folder: str) -> list[str]:
        """The Parquet files under `folder` (relative to the target), relative too."""
        base = f"{self._root}/{folder}"
        selector = self._pafs.FileSelector(base, recursive=True, allow_not_found=True)
        try:
            infos = self._fs.get_file_info(selector)
        except (OSError, self._pa.ArrowException) as exc:
            raise ArchiveError(f"cannot list {self.where}/{folder}: {reason(exc)}") from None
        found = [
            info.path
            for info in infos
            if info.type == self._pafs.FileType.File and info.path.endswith(".parquet")
        ]
        return sorted(path[len(self._root) + 1 :] for path in found)

    def _read(self, path: str, columns: Sequence[str] | None = None) -> Any:
        try:
            with self._fs.open_input_file(f"{self._root}/{path}") as source:
                return self._pq.ParquetFile(source).read(columns=columns)
        except (OSError, self._pa.ArrowException) as exc:
            raise ArchiveError(f"cannot read {self.where}/{path}: {reason(exc)}") from None

    def _copies(
        self, path: str, *, ids: set[int] | None = None, containing: str = ""
    ) -> Iterator[ArchivedRow]:
        """The rows of one submissions file (those of `ids`, or whose payload text holds
        `containing`), their payloads decoded."""
        channel = unquote(path.split("/")[1].removeprefix("channel="))
        data = self._read(path, columns=["id", "key", "payload"])
        rows = zip(
            *(data.column(name).to_pylist() for name in ("id", "key", "payload")), strict=True
        )
        for row_id, key, text in rows:
            if (ids is None or row_id in ids) and (containing in text or SEALED in text):
                yield ArchivedRow(row_id, channel, key, json.loads(text), path)

    def _table(self, name: str, items: Sequence[Submission] | Sequence[Event]) -> Any:
        """`items` as one Arrow table with the archive's columns."""
        pa = self._pa
        arrays = []
        for column in self._schemas[name]:
            attribute = column.name
            try:
                if attribute == "payload":
                    values = [_ENCODER.encode(item.payload) for item in items]  # type: ignore[union-attr]
                else:
                    values = list(map(attrgetter(attribute), items))
                array = pa.array(values, type=column.type)
            except (TypeError, ValueError, pa.ArrowException) as exc:
                raise InvalidInput(
                    f"{name}.{attribute} cannot be archived: {reason(exc)}"
                ) from None
            if not column.nullable and array.null_count:
                raise InvalidInput(f"{name}.{attribute} is empty in {array.null_count} row(s)")
            arrays.append(array)
        return pa.Table.from_arrays(arrays, schema=self._schemas[name])

    def _put(self, path: str, table: Any) -> int:
        """Write one file; on a folder, under a temporary name, flushed, then renamed."""
        full = f"{self._root}/{path}"
        try:
            if not self._local:
                return self._stream(full, table)
            folder = full.rpartition("/")[0]
            self._fs.create_dir(folder, recursive=True)
            partial = f"{full}.partial"
            try:
                size = self._stream(partial, table)
                _fsync(partial)
                self._fs.move(partial, full)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(partial)
                raise
            _fsync(folder)
            return size
        except (OSError, self._pa.ArrowException) as exc:
            raise ArchiveError(f"cannot write {self.where}/{path}: {reason(exc)}") from None

    def _stream(self, full: str, table: Any) -> int:
        with self._fs.open_output_stream(full) as out:
            self._pq.write_table(table, out, compression="zstd")
            return int(out.tell())


def _channel_folder(channel: str) -> str:
    """A channel's folder name: `channel=billing%3Aeu`."""
    return f"channel={quote(channel, safe='')}"


def _folder(sub: Submission) -> str:
    """A row's channel and month folder: `channel=c/month=2026-01`."""
    if sub.created_at is None:
        raise ArchiveError(f"submission #{sub.id} has no created_at: no month to look in")
    return f"{_channel_folder(sub.channel)}/month={_month(sub.created_at)}"


def _month(at: datetime) -> str:
    """`YYYY-MM` of a time in UTC (a naive time is taken as UTC, as the stores keep it)."""
    if at.tzinfo is not None:
        at = at.astimezone(UTC)
    return f"{at.year:04d}-{at.month:02d}"


def _groups(places: list[tuple[str, str]]) -> dict[tuple[str, str], list[int]]:
    """The positions of each (channel, month), in first-seen order."""
    groups: dict[tuple[str, str], list[int]] = {}
    for index, place in enumerate(places):
        groups.setdefault(place, []).append(index)
    return groups


def _fsync(path: str) -> None:
    """Flush a file or folder to disk: the database deletes the rows once this returns."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
