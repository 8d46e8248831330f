"""The Redis read model of workflows: status, current state, output and history.

It is a projection, not a source of truth: everything in it is rebuilt from
``keel.events`` (``keel projections rebuild``). Writes are idempotent by event
sequence number, so replaying a batch after a crash changes nothing.

Keys (``P`` = ``keel:<topic prefix>``): ``P:wf:<id>`` hash, ``P:wf:<id>:history``
list of JSON entries, ``P:workflows`` sorted set by start time, ``P:status:<s>`` sets.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import fields
from typing import Any

import redis

from orchestrator.domain.messages import Envelope
from orchestrator.domain.state import STATUSES, WorkflowState


def history_entry(env: Envelope[Any]) -> dict[str, Any]:
    """One history line; ``*_json`` fields are shown parsed, under their plain name."""
    data: dict[str, Any] = {}
    for f in fields(env.payload):
        value = getattr(env.payload, f.name)
        if f.name.endswith("_json") and isinstance(value, str):
            try:
                data[f.name[: -len("_json")]] = json.loads(value)
                continue
            except ValueError:
                pass
        data[f.name] = value
    return {"seq": env.seq, "type": env.type, "recorded_at": env.recorded_at, "data": data}


class Projection:
    def __init__(self, client: redis.Redis, topic_prefix: str) -> None:
        self.r = client
        self.p = f"keel:{topic_prefix}"

    @classmethod
    def from_url(cls, url: str, topic_prefix: str) -> Projection:
        return cls(redis.Redis.from_url(url, decode_responses=True), topic_prefix)

    def k_wf(self, wf: str) -> str:
        return f"{self.p}:wf:{wf}"

    def k_history(self, wf: str) -> str:
        return f"{self.p}:wf:{wf}:history"

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

    def write(
        self,
        updates: dict[str, tuple[WorkflowState, list[Envelope[Any]], str | None]],
    ) -> None:
        """Store new states and append their new history entries, in one round trip.

        ``updates`` maps workflow id to (new state, newly folded events, previous status).
        """
        pipe = self.r.pipeline(transaction=True)
        for wf, (state, events, old_status) in updates.items():
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
                    "state_json": state.to_json(),
                },
            )
            if events:
                pipe.rpush(self.k_history(wf), *(json.dumps(history_entry(e)) for e in events))
            if old_status != state.status:
                if old_status:
                    pipe.srem(f"{self.p}:status:{old_status}", wf)
                pipe.sadd(f"{self.p}:status:{state.status}", wf)
            if old_status is None:
                pipe.zadd(f"{self.p}:workflows", {wf: state.started_at})
        pipe.execute()

    def clear(self) -> int:
        """Delete the whole read model of this prefix; returns the number of keys removed."""
        removed = 0
        batch = []
        for key in self.r.scan_iter(match=f"{self.p}:*", count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                removed += self.r.unlink(*batch)
                batch.clear()
        if batch:
            removed += self.r.unlink(*batch)
        return removed

    # ------------------------------------------------------------------ reads
    def get(self, wf: str) -> dict[str, Any] | None:
        h = self.r.hgetall(self.k_wf(wf))
        if not h:
            return None
        return {
            "workflow_id": wf,
            "run_id": h["run_id"],
            "name": h["name"],
            "version": int(h["version"]),
            "status": h["status"],
            "state": h["state"] or None,
            "output": json.loads(h["output_json"]) if h["output_json"] else None,
            "failure_reason": h["failure_reason"] or None,
            "seq": int(h["seq"]),
            "started_at": int(h["started_at"]),
            "updated_at": int(h["updated_at"]),
        }

    def status(self, wf: str) -> str | None:
        return self.r.hget(self.k_wf(wf), "status")

    def history(self, wf: str) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self.r.lrange(self.k_history(wf), 0, -1)]

    def list(self, status: str | None = None, limit: int = 1000) -> list[dict[str, Any]]:
        if status is not None:
            if status not in STATUSES:
                raise ValueError(f"unknown status {status!r}; expected one of {STATUSES}")
            ids = sorted(self.r.smembers(f"{self.p}:status:{status}"))[:limit]
        else:
            ids = self.r.zrange(f"{self.p}:workflows", 0, limit - 1)
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

    def counts(self) -> dict[str, int]:
        pipe = self.r.pipeline(transaction=False)
        for s in STATUSES:
            pipe.scard(f"{self.p}:status:{s}")
        return dict(zip(STATUSES, pipe.execute(), strict=True))
