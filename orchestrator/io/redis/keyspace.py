"""Where Keel keeps what in Redis: one namespace per keyspace, so none can touch another.

``keel:<topic prefix>:<space>:...`` with one short space name each. Topic prefixes hold
no ``:`` (settings refuse it), and each key's variable part comes last, so a workflow id
can never reach into another key or another space, whatever characters it holds:

========  ===============================================  ==========================
space     keys                                              rebuilt by / lifetime
========  ===============================================  ==========================
``rm``    ``rm:wf:<id>`` hash, ``rm:hist:<id>`` list,       ``keel projections
          ``rm:workflows`` zset, ``rm:status:<s>`` sets      rebuild`` (and cleared by it)
``fx``    ``fx:<idempotency key>`` effect records           never cleared; TTL
``dd``    ``dd:<source>:<event id>`` webhook/callback       never cleared; TTL
          dedupe markers
``dlq``   ``dlq:redriven:<letter id>`` the claim that       never cleared
          closes a letter (a redrive or a discard)
``llm``   ``llm:call:<i>:<K>`` raw model responses,         never cleared; TTL
          ``llm:start|wait:<K>``, ``llm:cache:<hash>``
``lim``   ``lim:conc:<type>`` leases, ``lim:rate:<type>``    never cleared; purged as
          starts, ``lim:rsv:<K>`` reservations (per-type     they expire, TTL
          limits, ``handlers/type_limits.py``)
========  ===============================================  ==========================

The read model also holds ``rm:rebuild:lock``, ``rm:rebuild:epoch`` (a rebuild's lock and
generation) and ``rm:health:projector:<instance>``. ``rm:changed:<id>`` is a pub/sub
*channel*, not a key: the projector announces each change of a row's status on it in the
same step as the write, and a waiting client subscribes (so a clear never touches it).

Only the read model (``rm``) is ever cleared in bulk by Keel's services. ``keel bench``
deletes its own scratch prefix whole when a run ends (ops/scratch.py).

**Redis Cluster** (``clustered=True``, a ``redis+cluster://`` URL): a script or a
transaction may touch the keys of one hash slot only, so two spaces are hash-tagged (Redis
hashes only the text between the first ``{`` and the next ``}``), and the rest keep their
names, each script of theirs touching one key:

* the read model, all of it, in one slot: ``keel:{<prefix>:rm}:wf:<id>`` and so on. The
  projector writes a batch of rows, their histories, the status and search indexes and the
  human-task inbox in one guarded script, checked against the rebuild lock and epoch, so
  all of them share the slot of ``{<prefix>:rm}``: every key of one run and every
  cross-run index. One master holds a prefix's read model (as one server did);
* the limits of one activity type in its own slot: ``keel:<prefix>:lim:{t:<type>}:conc``,
  ``...:rate`` and ``...:rsv:<K>`` (the admission script reads and writes all three); the
  types spread over the masters;
* ``fx``, ``dd``, ``dlq`` and ``llm`` keys are unchanged: each is read and written alone
  (one-key scripts, ``SET NX``), so they spread over every slot by their whole name.

The tag opens right after a fixed text, so a ``}`` in a type or id cannot empty it or move
it: every key of a group shares the text up to its first ``}``.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.config.redis_url import RedisTopology, topology_of

__all__ = ["Keyspace"]


@dataclass(frozen=True, slots=True)
class Keyspace:
    """The keys of one topic prefix; ``clustered``: tagged for a Redis Cluster (module doc)."""

    topic_prefix: str
    clustered: bool = False

    @classmethod
    def for_url(cls, topic_prefix: str, url: str) -> Keyspace:
        """The keys of ``topic_prefix`` as the Redis at ``url`` holds them."""
        return cls(topic_prefix, clustered=topology_of(url) is RedisTopology.CLUSTER)

    @property
    def root(self) -> str:
        return f"keel:{self.topic_prefix}"

    @property
    def patterns(self) -> tuple[str, ...]:
        """``SCAN`` patterns that together match every key of this prefix (a cluster's
        read model starts ``keel:{``, outside ``root``)."""
        every = f"{self.root}:*"
        return (every, f"{self.read_model}*") if self.clustered else (every,)

    # -- read model (rebuildable) ------------------------------------------------------
    @property
    def read_model(self) -> str:
        """The prefix of every read-model key: the only one ``clear`` may scan."""
        if self.clustered:
            return f"keel:{{{self.topic_prefix}:rm}}:"
        return f"{self.root}:rm:"

    def workflow(self, workflow_id: str) -> str:
        return f"{self.read_model}wf:{workflow_id}"

    def history(self, workflow_id: str) -> str:
        return f"{self.read_model}hist:{workflow_id}"

    @property
    def workflows(self) -> str:
        return f"{self.read_model}workflows"

    def llm_usage(self, workflow_id: str) -> str:
        """The per-node provenance of a workflow's model calls (docs/llm-nodes.md)."""
        return f"{self.read_model}llm:{workflow_id}"

    def status(self, status: str) -> str:
        return f"{self.read_model}status:{status}"

    # -- effect store (never cleared) ---------------------------------------------------
    @property
    def effects(self) -> str:
        return f"{self.root}:fx:"

    def effect(self, idempotency_key: str) -> str:
        return f"{self.root}:fx:{idempotency_key}"

    # -- dedupe of webhooks and callbacks (never cleared) -------------------------------
    def dedupe(self, source: str, event_id: str) -> str:
        return f"{self.root}:dd:{source}:{event_id}"

    # -- LLM nodes: raw responses, provider back-off, the read-only cache (never cleared) --
    @property
    def llm(self) -> str:
        """The prefix of the LLM node keys (``handlers/llm/store.py`` builds the rest)."""
        return f"{self.root}:llm"

    # -- per-type limits of activities (never cleared; entries expire) -------------------
    def concurrency(self, activity_type: str) -> str:
        """The leases of running attempts of ``activity_type``, scored by expiry."""
        if self.clustered:
            return f"{self._limits_of(activity_type)}:conc"
        return f"{self.root}:lim:conc:{activity_type}"

    def rate(self, activity_type: str) -> str:
        """The starts (granted or reserved) of ``activity_type``, scored by when they end."""
        if self.clustered:
            return f"{self._limits_of(activity_type)}:rate"
        return f"{self.root}:lim:rate:{activity_type}"

    def reservation(self, activity_type: str, idempotency_key: str) -> str:
        """The start slot reserved for the next attempt of one logical attempt (in a
        cluster, in its type's slot: the admission script takes it with the type's books)."""
        if self.clustered:
            return f"{self._limits_of(activity_type)}:rsv:{idempotency_key}"
        return f"{self.root}:lim:rsv:{idempotency_key}"

    def _limits_of(self, activity_type: str) -> str:
        """The tagged stem of one type's limit keys in a cluster."""
        return f"{self.root}:lim:{{t:{activity_type}}}"

    # -- dead-letter redrives and discards ----------------------------------------------
    def redriven(self, letter_id: str) -> str:
        """The one claim of a letter, taken by its redrive or its discard (the name is the
        redrive's, from before discards; orchestrator/client/dead_letters.py)."""
        return f"{self.root}:dlq:redriven:{letter_id}"
