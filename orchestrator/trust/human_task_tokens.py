"""Human-task tokens: HMAC(key, task id), recomputed whenever shown, never stored.

The orchestrator's decider records only ``token_hash(token)`` in ``HumanTaskOpened``
(docs/human-tasks.md); the connector and ``keel human-tasks`` recompute the token from the
task id to show it to an approver, and send only its hash with a decision. Every process
of one deployment must therefore hold the same key:

1. ``KEEL_TASK_TOKEN_SECRET`` (32+ characters), else
2. the file ``KEEL_TASK_TOKEN_SECRET_FILE`` (must exist), else
3. ``<KEEL_HOME>/task-token.secret``, created (mode 0600) by the first process that needs
   it: processes that share a ``KEEL_HOME`` (``keel dev``, the test stack) agree on it.

A process whose application declares human tasks refuses to start when no key can be had,
with one line naming the variable (docs/configuration.md). The key never reaches a log,
an event or the read model.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from orchestrator.application.app import KeelApp, decider_of
from orchestrator.config.settings import MIN_SECRET_CHARS, Settings, private_dir
from orchestrator.domain.authoring.waits import HumanTask, token_hash
from orchestrator.domain.lifecycle.decider import Decider
from orchestrator.domain.model.errors import ConfigError
from orchestrator.domain.model.messages import Envelope, HumanTaskOpened

__all__ = [
    "DEFAULT_SECRET_FILE",
    "TaskTokens",
    "decider_for",
    "human_task_states",
    "load_task_tokens",
    "recorded_token_hashes",
    "tokens_for_app",
]

log = logging.getLogger("keel.tasks")

#: The key file under ``KEEL_HOME`` when neither variable is set.
DEFAULT_SECRET_FILE = "task-token.secret"


class TaskTokens:
    """Issues the token of a task id and its hash; holds the key (never printed)."""

    __slots__ = ("_key", "source")

    def __init__(self, key: bytes, source: str) -> None:
        if len(key) < MIN_SECRET_CHARS:
            raise ConfigError(
                f"the task-token key from {source} is shorter than {MIN_SECRET_CHARS} characters"
            )
        self._key = key
        #: Where the key came from (a variable or a path), for messages.
        self.source = source

    def __repr__(self) -> str:
        return f"<TaskTokens from {self.source}>"

    def issue(self, task_id: str) -> str:
        """The token of ``task_id``: hex HMAC-SHA256 under the key (unguessable)."""
        data = task_id.encode("utf-8", "surrogatepass")
        return hmac.new(self._key, data, hashlib.sha256).hexdigest()

    def derive(self, label: bytes) -> bytes:
        """A sub-key for another use of the secret (HMAC(key, label)), so a leak of one
        use forges nothing of the other (orchestrator/trust/decision_proofs.py)."""
        return hmac.new(self._key, label, hashlib.sha256).digest()

    def hash_of(self, task_id: str) -> str:
        """What history records for ``task_id``'s token (the decider's ``task_token_hash``)."""
        return token_hash(self.issue(task_id))

    @property
    def hasher(self) -> Callable[[str], str]:
        """The decider's ``task_token_hash``: a bound method, whose ``__self__`` is how the
        orchestrator's command loop finds the key that checks decision proofs."""
        return self.hash_of


def human_task_states(app: Any) -> list[str]:
    """``name vN.state`` of every state of ``app`` whose wait is a human task."""
    found = []
    for definition in app.definitions.values():
        for state in definition.states.values():
            if isinstance(state.wait, HumanTask):
                found.append(f"{definition.name} v{definition.version}.{state.name}")
    return sorted(found)


def _read_key(path: Path, what: str) -> bytes:
    try:
        key = path.read_bytes().strip()
    except OSError as exc:
        raise ConfigError(f"{what} '{path}' cannot be read: {exc.strerror}") from None
    if len(key) < MIN_SECRET_CHARS:
        raise ConfigError(f"{what} '{path}' holds fewer than {MIN_SECRET_CHARS} characters")
    return key


def _create_key(path: Path) -> bytes:
    """Create ``path`` with a fresh key, atomically: a concurrent creator's key wins."""
    try:
        private_dir(path.parent)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, secrets.token_hex(32).encode() + b"\n")
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # fails if another process created it first
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create the task-token key file '{path}': {exc.strerror}; set "
            "KEEL_TASK_TOKEN_SECRET (32+ characters, the same for every Keel process)"
        ) from None
    log.warning(
        "human tasks: no KEEL_TASK_TOKEN_SECRET; created the key file %s (fine for local "
        "development; set KEEL_TASK_TOKEN_SECRET on every process of a real deployment)",
        path,
    )
    return _read_key(path, "the task-token key file")


def load_task_tokens(settings: Settings, *, create: bool = True) -> TaskTokens:
    """The deployment's task-token key (see the module docstring); ``ConfigError`` else."""
    if settings.task_token_secret is not None:
        key = settings.task_token_secret.get_secret_value().strip().encode()
        return TaskTokens(key, "KEEL_TASK_TOKEN_SECRET")
    if settings.task_token_secret_file is not None:
        path = settings.task_token_secret_file
        return TaskTokens(_read_key(path, "KEEL_TASK_TOKEN_SECRET_FILE"), str(path))
    path = settings.home / DEFAULT_SECRET_FILE
    if path.exists():
        return TaskTokens(_read_key(path, "the task-token key file"), str(path))
    if not create:
        raise ConfigError(
            "no task-token key: set KEEL_TASK_TOKEN_SECRET (32+ characters, the same for "
            f"every Keel process) or KEEL_TASK_TOKEN_SECRET_FILE; '{path}' does not exist"
        )
    return TaskTokens(_create_key(path), str(path))


def tokens_for_app(settings: Settings, app: Any) -> TaskTokens | None:
    """The key when ``app`` declares human tasks (``ConfigError`` naming them if none can
    be had), else None: an application without human tasks needs no key."""
    states = human_task_states(app)
    if not states:
        return None
    try:
        return load_task_tokens(settings)
    except ConfigError as exc:
        shown = ", ".join(states[:5]) + (" ..." if len(states) > 5 else "")
        raise ConfigError(f"the application declares human tasks ({shown}): {exc}") from None


def decider_for(settings: Settings, app: KeelApp) -> Decider:
    """The orchestrator's decider for ``app`` (a ``KeelApp``): it issues task tokens under
    the deployment's key. An application that declares human tasks and has no key refuses
    here, at startup, with one line (``ConfigError``)."""
    tokens = tokens_for_app(settings, app)
    return decider_of(app, None if tokens is None else tokens.hasher)


def recorded_token_hashes(envelopes: Iterable[Envelope[Any]]) -> Callable[[str], str]:
    """For replay: the token hash each task's ``HumanTaskOpened`` recorded, by task id.

    A token hash depends on the deployment's key, not on the code, so ``keel replay-check``
    decides again with the hashes history holds (``decider_of(app, recorded_token_hashes(h))``).
    """
    recorded = {
        env.payload.task_id: env.payload.token_hash
        for env in envelopes
        if isinstance(env.payload, HumanTaskOpened)
    }
    return lambda task_id: recorded.get(task_id, "")
