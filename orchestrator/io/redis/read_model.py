"""The Redis read model of workflows: status, current state, output and history.

It is a projection, not a source of truth: everything in it is rebuilt from
``keel.events`` (``keel projections rebuild``). Writes are idempotent by event
sequence number, so replaying a batch after a crash changes nothing.

Every key lives in the read-model space of :class:`~orchestrator.io.redis.keyspace.Keyspace`
(``keel:<prefix>:rm:...``), so :meth:`Projection.clear` can never touch the effect
store, the dedupe markers or the dead-letter books. Two more keys coordinate a rebuild
with live projectors (docs/configuration.md, "The read model"):
``rm:rebuild:lock`` (held while a rebuild runs; live projectors pause) and
``rm:rebuild:epoch`` (changed by each rebuild; a projector whose cache belongs to another
epoch drops it and reloads from Redis).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import redis
from redis.commands.core import CoreCommands

from orchestrator.config.settings import redact
from orchestrator.domain.authoring.definitions import WorkflowDefinition
from orchestrator.domain.model.errors import InvalidInputError, UnavailableError
from orchestrator.domain.model.messages import Envelope
from orchestrator.domain.model.state import NEEDS_ATTENTION, STATUSES, WorkflowState
from orchestrator.io.ports import EpochChanged, RebuildRunning, SeqConflict
from orchestrator.io.redis.client_factory import (
    REDIS_AWAY,
    RedisUse,
    away_reason,
    is_cluster,
    redis_client,
)
from orchestrator.io.redis.human_task_inbox import TaskWrites
from orchestrator.io.redis.keyspace import Keyspace
from orchestrator.io.redis.run_index import Found, IndexQuery, RunIndex
from orchestrator.records import fast_json
from orchestrator.records.history_entries import history_entry
from orchestrator.records.llm_usage import NodeUsage, UsageField, empty_summary, usages_of
from orchestrator.records.read_model_rows import ANNOUNCE, GUARDED_WRITE_LUA, ROW_FIELDS, row_view
from orchestrator.trust.sealing import mask

if TYPE_CHECKING:  # given by a live projector; the client never loads prometheus-client
    from orchestrator.telemetry.prometheus import ServiceMetrics

T = TypeVar("T")

#: workflow id -> (new state, newly folded events or their history lines, previous status)
Updates = Mapping[str, tuple[WorkflowState, Sequence[Envelope[Any] | str], str | None]]

#: A rebuild holds its lock this long past its last sign of life.
REBUILD_LOCK_TTL_S = 60


#: A command with more arguments than this is not passed through the script (Lua's
#: ``unpack`` has a stack bound); such a batch is written with WATCH and MULTI instead.
_MAX_SCRIPT_COMMAND_ARGS = 4000


def _text(value: object) -> str | None:
    """A Redis reply (decoded to ``str`` by the client) or None."""
    return None if value is None else str(value)


@contextmanager
def reachable(url: str) -> Iterator[None]:
    """Turn "Redis did not answer" into one operator line (:class:`UnavailableError`)."""
    try:
        yield
    except REDIS_AWAY as exc:
        raise UnavailableError(
            f"Redis at {redact(url)} did not answer: {away_reason(exc)}"
        ) from None


def _seq_text(seq: int | None) -> str | None:
    return None if seq is None else str(seq)


def _attention(state: WorkflowState) -> str:
    """Why the run needs an operator: its own reason, else the activities waiting on one."""
    if state.attention_reason:
        return state.attention_reason
    if state.status == NEEDS_ATTENTION:
        waiting = state.needing_attention()
        if waiting:
            return f"activities need an operator: {', '.join(waiting)}"[:500]
    return ""


def _tasks_summary(state: WorkflowState) -> str:
    """The run's human tasks, for ``keel workflow show`` (the inbox holds the rest)."""
    if not state.human_tasks:
        return "[]"  # most runs: nothing to encode
    return json.dumps(
        [
            {
                "task_id": t.task_id,
                "task_name": t.task_name,
                "status": str(t.status),
                "owner": t.owner,
                "level": t.level,
                "decision": t.decision,
                "actor": t.actor,
                "due_at": t.due_at or None,
                "expires_at": t.expires_at,
            }
            for t in state.human_tasks.values()
        ]
    )


class CommandQueue(CoreCommands):
    """Redis commands written down, not sent: the guarded write runs them in its script.
    (A cluster client's pipeline keeps its queue elsewhere than a server's, so neither's
    is read.)"""

    _event_dispatcher: Any = None  # redis-py's hook for events of sent commands: none sent

    def __init__(self) -> None:
        self.commands: list[tuple[Any, ...]] = []

    def execute_command(self, *args: Any, **options: Any) -> None:
        self.commands.append(args)


class Projection:
    def __init__(
        self,
        client: redis.Redis,
        topic_prefix: str,
        url: str = "redis",
        definitions: Mapping[tuple[str, int], WorkflowDefinition] | None = None,
        metrics: ServiceMetrics | None = None,
    ) -> None:
        """``definitions``: whose search attributes the writes index (a projector's app);
        ``metrics``: where a live projector counts what it wrote (none: nothing counted)."""
        self.r = client
        self.metrics = metrics
        self.ks = Keyspace(topic_prefix, clustered=is_cluster(client))
        #: The index of runs by name, status, time and search attribute (``run_index.py``).
        self.index = RunIndex(self.ks, definitions)
        self.url = url
        self.lock_key = f"{self.ks.read_model}rebuild:lock"
        self.epoch_key = f"{self.ks.read_model}rebuild:epoch"
        self._guarded_write: Any = None  # the Lua script, registered on first use

    @classmethod
    def from_url(cls, url: str, topic_prefix: str) -> Projection:
        return cls(redis_client(url, RedisUse.READ_MODEL), topic_prefix, url)

    def k_wf(self, wf: str) -> str:
        return self.ks.workflow(wf)

    def k_history(self, wf: str) -> str:
        return self.ks.history(wf)

    def changes_channel(self, wf: str) -> str:
        """The pub/sub channel on which a live projector announces a change of the row's
        status (its creation included), atomically with the write: ``wait`` listens there."""
        return f"{self.ks.read_model}changed:{wf}"

    def k_llm(self, wf: str) -> str:
        """The provenance list of the workflow's completed LLM nodes (read-model space)."""
        return self.ks.llm_usage(wf)

    def _call(self, fn: Callable[[], T]) -> T:
        with reachable(self.url):
            return fn()

    # ------------------------------------------------------------------ writes
    def load_states(self, workflow_ids: Iterable[str]) -> dict[str, WorkflowState]:
        ids = list(workflow_ids)
        pipe = self.r.pipeline(transaction=False)
        for wf in ids:
            pipe.hget(self.k_wf(wf), "state_json")
        found = {}
        for wf, js in zip(ids, pipe.execute(), strict=True):
            if js:
                found[wf] = WorkflowState.from_json(js)
        return found

    def _queue_updates(
        self,
        pipe: Any,
        updates: Updates,
        tasks: TaskWrites | None = None,
    ) -> dict[str, list[NodeUsage]]:
        """Queue the writes of ``updates`` (and of ``tasks``); returns the LLM node usages
        they add, per workflow.

        Usage sums are increments, queued in the same transaction as the state whose
        sequence number covers them, so an event folded twice cannot count twice.
        """
        earlier_types = tasks.earlier_activity_types if tasks is not None else {}
        usages: dict[str, list[NodeUsage]] = {}
        for wf, (state, events, old_status) in updates.items():
            # the row is new or its run continued as new in these events: the indexes
            # are by the start of the current run, as the row's ``started_at``
            restarted = old_status is None or state.run_base_seq > state.seq - len(events)
            indexed = self.index.queue(pipe, wf, state, events, old_status, restarted)
            pipe.hset(
                self.k_wf(wf),
                mapping={
                    "workflow_id": wf,
                    "run_id": state.run_id,
                    "name": state.name,
                    "version": state.version,
                    "status": state.status,
                    "state": state.current_state or "",
                    "output_json": state.output_json or "",
                    "failure_reason": state.failure_reason or state.cancel_reason or "",
                    "seq": state.seq,
                    "started_at": state.started_at,
                    "updated_at": state.updated_at,
                    "attention_reason": _attention(state),
                    "run_base_seq": state.run_base_seq,
                    "human_tasks_json": _tasks_summary(state),
                    "state_json": state.to_json(fast_json.dumps_sorted),
                    **indexed,
                },
            )
            if events:
                lines = (
                    e if isinstance(e, str) else fast_json.dumps(history_entry(e)) for e in events
                )
                pipe.rpush(self.k_history(wf), *lines)
                types = {a.activity_id: a.activity_type for a in state.activities.values()}
                found = usages_of(events, types, earlier_types.get(wf))
                if found:
                    self._queue_usage(pipe, wf, found)
                    usages[wf] = found
            if old_status != state.status:
                if old_status:
                    pipe.srem(self.ks.status(old_status), wf)
                pipe.sadd(self.ks.status(state.status), wf)
            if restarted:
                pipe.zadd(self.ks.workflows, {wf: state.started_at})
        return usages

    def _queue_usage(self, pipe: Any, wf: str, found: list[NodeUsage]) -> None:
        key = self.k_wf(wf)
        pipe.hincrby(key, UsageField.PROMPT_TOKENS, sum(u.prompt_tokens for u in found))
        pipe.hincrby(key, UsageField.COMPLETION_TOKENS, sum(u.completion_tokens for u in found))
        pipe.hincrby(key, UsageField.TOTAL_TOKENS, sum(u.total_tokens for u in found))
        for u in found:  # one float addition per node, in event order, however batched
            if u.cost_usd:
                pipe.hincrbyfloat(key, UsageField.COST_USD, u.cost_usd)
        pipe.hincrby(key, UsageField.CACHE_HITS, sum(1 for u in found if u.cache_hit))
        pipe.hincrby(key, UsageField.NODES, len(found))
        pipe.hincrby(key, UsageField.CALLS, sum(u.calls for u in found))
        pipe.rpush(self.k_llm(wf), *(json.dumps(u.provenance) for u in found))

    def write(self, updates: Updates, tasks: TaskWrites | None = None) -> None:
        """Store new states and append their new history entries, in one transaction.

        ``updates`` maps workflow id to (new state, newly folded events, previous status);
        ``tasks`` (a :class:`~orchestrator.io.redis.human_task_inbox.TaskWrites`) are the
        inbox's changes of the same events, written in the same transaction.
        Unguarded: for a rebuild (which holds the lock) and for tests.
        """
        pipe = self.r.pipeline(transaction=True)
        self._queue_updates(pipe, updates, tasks)
        if tasks:
            tasks.queue(pipe)
        pipe.execute()

    def write_guarded(
        self,
        updates: Updates,
        epoch: str | None,
        tasks: TaskWrites | None = None,
        expected: Mapping[str, int | None] | None = None,
    ) -> None:
        """:meth:`write` for a live projector whose cache belongs to rebuild ``epoch``.

        The write happens only while no rebuild holds the lock (else
        :class:`RebuildRunning`), the epoch is unchanged (else :class:`EpochChanged`) and
        each row named in ``expected`` holds that sequence number (``None``: no row; else
        :class:`SeqConflict`); all of it is checked atomically with the write, in one
        round trip (a Lua script). Each row whose status changes (or that is created) is
        announced on its :meth:`changes_channel` in the same step.
        """
        queue = CommandQueue()
        usages = self._queue_updates(queue, updates, tasks)
        if tasks:
            tasks.queue(queue)
        for wf, (state, _, old_status) in updates.items():
            if old_status != state.status:
                note = {"run_id": state.run_id, "status": str(state.status), "seq": state.seq}
                queue.execute_command(
                    ANNOUNCE, self.changes_channel(wf), self.k_wf(wf), fast_json.dumps(note)
                )
        commands = queue.commands
        if any(len(args) > _MAX_SCRIPT_COMMAND_ARGS for args in commands):
            self._write_watched(commands, epoch, expected or {})
        else:
            self._write_scripted(commands, epoch, expected or {})
        self._record_metrics(updates, usages)

    def _write_scripted(
        self, commands: list[tuple[Any, ...]], epoch: str | None, expected: Mapping[str, Any]
    ) -> None:
        argv: list[Any] = [epoch or "", len(expected)]
        for wf, seq in expected.items():
            argv += [self.k_wf(wf), "" if seq is None else str(seq)]
        try:
            argv.append(fast_json.dumps_commands(commands))
        except TypeError:  # an argument JSON text cannot carry: the same write, watched
            self._write_watched(commands, epoch, expected)
            return
        if self._guarded_write is None:
            self._guarded_write = self.r.register_script(GUARDED_WRITE_LUA)
        reply = self._guarded_write(keys=[self.lock_key, self.epoch_key], args=argv)
        self._raise_refusal([_text(x) or "" for x in reply], expected)

    def _raise_refusal(self, reply: list[str], expected: Mapping[str, Any]) -> None:
        if reply[0] == "rebuild":
            raise RebuildRunning("a rebuild of the read model is running")
        if reply[0] == "epoch":
            raise EpochChanged(reply[1] or None)
        if reply[0] == "seq":
            by_key = {self.k_wf(wf): wf for wf in expected}
            raise SeqConflict([by_key.get(k, k) for k in reply[1:]])

    def _write_watched(
        self, commands: list[tuple[Any, ...]], epoch: str | None, expected: Mapping[str, Any]
    ) -> None:
        """The same checks and writes with WATCH and MULTI (a command too long for Lua)."""
        rows = [self.k_wf(wf) for wf in expected]
        with self.r.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(self.lock_key, self.epoch_key, *rows)
                    lock, current = pipe.mget(self.lock_key, self.epoch_key)
                    if lock:
                        raise RebuildRunning("a rebuild of the read model is running")
                    if current != epoch:
                        raise EpochChanged(_text(current))
                    conflicts = [
                        wf
                        for wf, seq in expected.items()
                        if _text(pipe.hget(self.k_wf(wf), "seq")) != _seq_text(seq)
                    ]
                    if conflicts:
                        raise SeqConflict(conflicts)
                    pipe.multi()
                    for args in commands:  # announced without the row: a plain PUBLISH
                        if args[0] == ANNOUNCE:
                            args = ("PUBLISH", args[1], args[3])
                        pipe.execute_command(*args)
                    pipe.execute()
                    return
                except redis.WatchError:
                    continue

    def _record_metrics(self, updates: Updates, usages: dict[str, list[NodeUsage]]) -> None:
        """Count the committed events and LLM node usage in the metrics (live projectors
        only: a rebuild replays events already counted; docs/metrics.md)."""
        if self.metrics is None:
            return
        self.metrics.projector.record(updates, usages)
        if not usages:
            return
        m = self.metrics.llm
        for wf, found in usages.items():
            m.record(found, updates[wf][0].name)

    def epoch(self) -> str | None:
        return _text(self._call(lambda: self.r.get(self.epoch_key)))

    def rebuild_running(self) -> bool:
        return bool(self._call(lambda: self.r.exists(self.lock_key)))

    # ------------------------------------------------------------------ rebuild
    def begin_rebuild(self) -> str:
        """Take the rebuild lock and start a new epoch; returns the lock's token.

        Live projectors stop writing from here until :meth:`end_rebuild`; one started
        later sees the new epoch and drops what it cached.
        """
        token = uuid.uuid4().hex
        with reachable(self.url):
            if not self.r.set(self.lock_key, token, nx=True, ex=REBUILD_LOCK_TTL_S):
                raise RebuildRunning(
                    "another rebuild of this read model is running; wait for it to finish "
                    f"(its lock expires {REBUILD_LOCK_TTL_S}s after it stops)"
                )
            self.r.set(self.epoch_key, token)
        return token

    def refresh_rebuild(self, token: str) -> None:
        """Keep the lock while the rebuild makes progress."""
        with reachable(self.url):
            if self.r.get(self.lock_key) != token:
                raise RebuildRunning("the rebuild lock was lost (expired or taken over)")
            self.r.expire(self.lock_key, REBUILD_LOCK_TTL_S)

    def end_rebuild(self, token: str) -> None:
        """Publish a fresh epoch and release the lock: live projectors reload and go on."""
        with reachable(self.url):
            pipe = self.r.pipeline(transaction=True)
            pipe.set(self.epoch_key, uuid.uuid4().hex)
            pipe.delete(self.lock_key)
            pipe.execute()

    def clear(self) -> int:
        """Delete the read model of this prefix (``keel:<prefix>:rm:*`` only).

        The rebuild lock and epoch stay; returns the number of keys removed.
        """
        keep = {self.lock_key, self.epoch_key}
        removed = 0
        batch: list[str] = []
        with reachable(self.url):
            for key in self.r.scan_iter(match=f"{self.ks.read_model}*", count=1000):
                if key in keep:
                    continue
                batch.append(key)
                if len(batch) >= 1000:
                    removed += self.r.unlink(*batch)
                    batch.clear()
            if batch:
                removed += self.r.unlink(*batch)
        return removed

    def health(self) -> dict[str, Any]:
        """What live projectors last published about themselves, and any rebuild running."""

        def read() -> dict[str, Any]:
            keys = sorted(self.r.scan_iter(match=f"{self.ks.read_model}health:projector:*"))
            values = self.r.mget(keys) if keys else []
            projectors = [json.loads(v) for v in values if v]
            return {"rebuild_running": bool(self.r.exists(self.lock_key)), "projectors": projectors}

        return self._call(read)

    # ------------------------------------------------------------------ reads
    def get(self, wf: str) -> dict[str, Any] | None:
        values = self._call(lambda: self.r.hmget(self.k_wf(wf), ROW_FIELDS))
        if values[0] is None:  # no run id: no row
            return None
        return row_view(wf, dict(zip(ROW_FIELDS, values, strict=True)))

    def get_with_first_line(self, wf: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """The row and the first line of its history, read in one transaction (how a run
        started, for a start that may join it); None while either is missing."""

        def read() -> tuple[list[Any], Any]:
            pipe = self.r.pipeline(transaction=True)
            pipe.hmget(self.k_wf(wf), ROW_FIELDS)
            pipe.lindex(self.k_history(wf), 0)
            values, first = pipe.execute()
            return values, first

        values, first = self._call(read)
        if values[0] is None or first is None:
            return None
        return row_view(wf, dict(zip(ROW_FIELDS, values, strict=True))), json.loads(first)

    def llm_usage(self, wf: str) -> dict[str, Any]:
        """Tokens, cost and cache hits of the workflow's model calls, and one provenance
        line per completed LLM node (docs/llm-nodes.md, "Cost and provenance")."""

        def read() -> tuple[list[Any], list[str]]:
            pipe = self.r.pipeline(transaction=True)
            pipe.hmget(self.k_wf(wf), *UsageField)
            pipe.lrange(self.k_llm(wf), 0, -1)
            sums, lines = pipe.execute()
            return sums, lines

        sums, lines = self._call(read)
        values = dict(zip(UsageField, sums, strict=True))
        out = empty_summary()
        for field_, name in (
            (UsageField.PROMPT_TOKENS, "prompt_tokens"),
            (UsageField.COMPLETION_TOKENS, "completion_tokens"),
            (UsageField.TOTAL_TOKENS, "total_tokens"),
            (UsageField.CACHE_HITS, "cache_hits"),
            (UsageField.NODES, "nodes"),
            (UsageField.CALLS, "calls"),
        ):
            out[name] = int(values[field_] or 0)
        out["cost_usd"] = round(float(values[UsageField.COST_USD] or 0.0), 8)
        out["provenance"] = [json.loads(x) for x in lines]
        return out

    def status(self, wf: str) -> str | None:
        return _text(self._call(lambda: self.r.hget(self.k_wf(wf), "status")))

    def history(self, wf: str) -> list[dict[str, Any]]:
        raw = self._call(lambda: self.r.lrange(self.k_history(wf), 0, -1))
        return [mask(json.loads(x)) for x in raw]

    def statuses(self, ids: list[str]) -> list[str | None]:
        """The status of each workflow id (None: not in the read model), in one round trip."""

        def read() -> list[str | None]:
            pipe = self.r.pipeline(transaction=False)
            for wf in ids:
                pipe.hget(self.k_wf(wf), "status")
            return [None if st is None else str(st) for st in pipe.execute()]

        return self._call(read)

    def mark_error(self, wf: str, reason: str) -> None:
        """Note on the workflow's row that the projector skipped one of its events."""
        self.r.hset(self.k_wf(wf), "projection_error", reason)

    def list(self, status: str | None = None, limit: int = 1000) -> list[dict[str, Any]]:
        if status is not None and status not in STATUSES:
            raise InvalidInputError(
                f"unknown status '{status}'; expected one of {', '.join(STATUSES)}"
            )

        def read() -> list[dict[str, Any]]:
            if status is not None:
                ids = sorted(str(x) for x in self.r.smembers(self.ks.status(status)))[:limit]
            else:
                ids = [str(x) for x in self.r.zrange(self.ks.workflows, 0, limit - 1)]
            pipe = self.r.pipeline(transaction=False)
            for wf in ids:
                pipe.hmget(self.k_wf(wf), "name", "version", "status")
            rows = []
            for wf, (name, version, st) in zip(ids, pipe.execute(), strict=True):
                if name is not None:
                    rows.append(
                        {"workflow_id": wf, "name": name, "version": int(version), "status": st}
                    )
            return rows

        return self._call(read)

    def find_runs(self, query: IndexQuery) -> Found:
        """A page of the runs ``query`` finds (``run_index.py``; ``client/run_search.py``)."""
        return self._call(lambda: self.index.find(self.r, query))

    def counts(self) -> dict[str, int]:
        def read() -> dict[str, int]:
            pipe = self.r.pipeline(transaction=False)
            for s in STATUSES:
                pipe.scard(self.ks.status(s))
            return dict(zip(STATUSES, pipe.execute(), strict=True))

        return self._call(read)
