"""The read model's row as clients see it, and the guarded write's Lua script.

A live projector writes each batch in one Lua script (:meth:`Projection.write_guarded
<orchestrator.io.redis.read_model.Projection.write_guarded>`) and announces each row whose
status changed on the row's channel. The announcement carries the row's client-visible
fields, read inside the script after every write of the batch, so a client woken by it
needs no read of its own (git show 6f66b40:docs/performance.md, "The finished row in the
announcement").
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from orchestrator.trust.sealing import mask

__all__ = [
    "ANNOUNCE",
    "GUARDED_WRITE_LUA",
    "ROW_FIELDS",
    "ROW_NOTE_MAX_BYTES",
    "announced_row",
    "row_view",
]

#: The fields of a row that a client reads (:meth:`Projection.get`) and that an
#: announcement carries; ``state_json`` (the projector's own, and large) and the LLM usage
#: sums stay out.
ROW_FIELDS = (
    "run_id",
    "name",
    "version",
    "status",
    "state",
    "output_json",
    "failure_reason",
    "seq",
    "started_at",
    "updated_at",
    "projection_error",
    "attention_reason",
    "run_base_seq",
    "human_tasks_json",
)

#: An announcement carries its row only up to this many bytes of field values; past it
#: the client reads the row, as it does for an announcement without one.
ROW_NOTE_MAX_BYTES = 16 * 1024

#: The pseudo-command that announces a row's change: the script reads the row's
#: :data:`ROW_FIELDS` after every write of the batch and publishes the note with them.
ANNOUNCE = "keel.announce"

#: The guarded write in one round trip: refuse while a rebuild holds the lock
#: (``rebuild``) or after one changed the epoch (``epoch``), refuse if a row's ``seq`` is
#: not the one expected (``seq`` and the rows' keys), else run the queued commands; the
#: announcements (``keel.announce channel row-key note``) run last, so each carries its
#: row as written. ARGV: epoch ('' for none), guard count, (row key, expected seq or ''),
#: then the commands as one JSON array of arrays of strings (``fast_json.dumps_commands``:
#: decoded by Redis, not packed argument by argument in Python). Atomic like MULTI/EXEC.
GUARDED_WRITE_LUA = (
    "local ROW_FIELDS = {"
    + ", ".join(f"'{f}'" for f in ROW_FIELDS)
    + "}\n"
    + f"local ROW_NOTE_MAX = {ROW_NOTE_MAX_BYTES}\n"
    + """
if redis.call('EXISTS', KEYS[1]) == 1 then return {'rebuild'} end
local current = redis.call('GET', KEYS[2]) or ''
if current ~= ARGV[1] then return {'epoch', current} end
local i = 3
local conflicts = {'seq'}
for _ = 1, tonumber(ARGV[2]) do
  local have = redis.call('HGET', ARGV[i], 'seq') or ''
  if have ~= ARGV[i + 1] then conflicts[#conflicts + 1] = ARGV[i] end
  i = i + 2
end
if #conflicts > 1 then return conflicts end
local announce = {}
for _, command in ipairs(cjson.decode(ARGV[i])) do
  if command[1] == '"""
    + ANNOUNCE
    + """' then
    announce[#announce + 1] = command
  else
    redis.call(unpack(command))
  end
end
for _, command in ipairs(announce) do
  local note = cjson.decode(command[4])
  local values = redis.call('HMGET', command[3], unpack(ROW_FIELDS))
  local row, size = {}, 0
  for j, field in ipairs(ROW_FIELDS) do
    if values[j] then
      row[field] = values[j]
      size = size + #values[j]
    end
  end
  if size <= ROW_NOTE_MAX then note['row'] = row end
  redis.call('PUBLISH', command[2], cjson.encode(note))
end
return {'ok'}
"""
)


def row_view(wf: str, h: Mapping[str, Any]) -> dict[str, Any]:
    """A client's view of a row from its stored :data:`ROW_FIELDS` (read, or announced)."""
    return {
        "workflow_id": wf,
        "run_id": h["run_id"],
        "name": h["name"],
        "version": int(h["version"]),
        "status": h["status"],
        "state": h["state"] or None,
        "output": mask(json.loads(h["output_json"])) if h["output_json"] else None,
        "failure_reason": h["failure_reason"] or None,
        "seq": int(h["seq"]),
        "started_at": int(h["started_at"]),
        "updated_at": int(h["updated_at"]),
        "projection_error": h.get("projection_error") or None,
        "attention_reason": h.get("attention_reason") or None,
        "run_base_seq": int(h.get("run_base_seq") or 0),
        "human_tasks": json.loads(h.get("human_tasks_json") or "[]"),
    }


def announced_row(wf: str, note: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The row an announcement carries, as :func:`row_view` (None: it carries none, as
    from a projector before this version, a row past the size cap or an unreadable note)."""
    row = note.get("row") if note else None
    if not isinstance(row, dict):
        return None
    try:
        return row_view(wf, row)
    except (KeyError, TypeError, ValueError):
        return None
