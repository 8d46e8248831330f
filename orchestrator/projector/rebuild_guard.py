"""Refuse a read-model rebuild the application cannot finish.

A rebuild drops the read model before it replays the events; with an application that
lacks some recorded workflow (the wrong ``--app``, the bundled example app over a user's
events) every such run would be left behind as ``running`` (issue 46). So the events are
read once first, and a workflow the application does not define stops the rebuild before
any Redis key is written or deleted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from orchestrator.config.settings import Settings
from orchestrator.domain.model.errors import InvalidInputError
from orchestrator.domain.model.messages import Envelope, WorkflowStarted
from orchestrator.domain.model.migration_messages import WorkflowMigrated
from orchestrator.io.kafka.clients import list_partitions, read_partitions
from orchestrator.payload_schemas.codec import codec_for


def undefined_workflows(
    envelopes: Iterable[Envelope[Any]], defined: Mapping[tuple[str, int], object]
) -> Counter[tuple[str, int]]:
    """Runs per (workflow, version) recorded in ``envelopes`` that ``defined`` lacks: a
    run's start and every version a migration moved it to."""
    names: dict[str, str] = {}
    seen: set[tuple[str, str, int]] = set()
    for env in envelopes:
        p = env.payload
        if isinstance(p, WorkflowStarted):
            names[env.workflow_id] = p.name
            seen.add((env.workflow_id, p.name, p.version))
        elif isinstance(p, WorkflowMigrated) and env.workflow_id in names:
            seen.add((env.workflow_id, names[env.workflow_id], p.to_version))
    return Counter((name, v) for _, name, v in seen if (name, v) not in defined)


def refuse_undefined(
    envelopes: Iterable[Envelope[Any]], defined: Mapping[tuple[str, int], object], spec: str
) -> None:
    """``InvalidInputError`` naming each workflow the application ``spec`` does not define."""
    missing = undefined_workflows(envelopes, defined)
    if not missing:
        return
    listed = ", ".join(f"'{n}' v{v} ({count} run(s))" for (n, v), count in sorted(missing.items()))
    raise InvalidInputError(
        f"refusing to rebuild: the events hold runs of {listed}, which {spec} does not "
        "define; nothing was changed. Give the application that defines them (--app, "
        "KEEL_APP or [tool.keel] app)"
    )


def recorded_events(settings: Settings) -> Iterator[Envelope[Any]]:
    """Every event of ``<prefix>.events`` the codec reads (the rebuild skips the others too)."""
    topic = settings.topic("events")
    codec = codec_for(settings)
    for msg in read_partitions(settings, topic, dict.fromkeys(list_partitions(settings, topic), 0)):
        try:
            yield codec.decode(msg.value() or b"")
        except Exception:  # undecodable: the rebuild logs and skips it as well
            continue
