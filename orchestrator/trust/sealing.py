"""Sensitive fields: declared on a pydantic model, sealed before anything is written.

A field declared ``Sensitive[str]`` (or with ``json_schema_extra={"keel_sensitive": True}``)
never travels in clear: the client replaces its value with a sealed envelope
``{"$keel_sealed": "<token>", "kid": "<key id>"}`` before the command is produced, the
orchestrator and its pure domain carry the envelope as an opaque value, and only the
worker opens it, right before the handler call. Display paths show ``***``.

The token is AES-256-GCM (the ``cryptography`` library) over the JSON of the value, with
the key id as associated data. Keys come from ``KEEL_SEAL_KEY`` or ``KEEL_SEAL_KEY_FILE``
as ``kid:base64key`` entries; the first entry seals, every entry opens, so a key is
rotated by putting a new one first and keeping the old ones until no run holds their
values (docs/secrets.md).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import re
import secrets
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeAlias, TypeVar

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic import BaseModel, ConfigDict, Field, model_serializer

from orchestrator.config.settings import private_dir
from orchestrator.domain.model.errors import ConfigError, InvalidInputError

if TYPE_CHECKING:
    from orchestrator.config.settings import Settings

log = logging.getLogger("keel.sealing")

#: The envelope's key holding the token; a JSON object with it (and ``kid``) is sealed.
SEALED_KEY = "$keel_sealed"
#: What every display path prints instead of a sealed value.
MASK = "***"
#: ``json_schema_extra`` flag that declares a field sensitive without ``Sensitive[...]``.
SENSITIVE_FLAG = "keel_sensitive"
#: The key file created under ``KEEL_HOME`` when no key is configured (local development).
DEFAULT_KEY_FILE = "seal.keys"

_KID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_NONCE_BYTES = 12


class SealedValue(BaseModel):
    """A sealed value as the domain sees it: opaque, and always dumped as its envelope."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    token: str = Field(alias="$keel_sealed")
    kid: str

    @model_serializer
    def _as_envelope(self) -> dict[str, str]:
        return {SEALED_KEY: self.token, "kid": self.kid}

    def __repr__(self) -> str:
        return f"SealedValue({MASK})"

    __str__ = __repr__


class _SensitiveMarker:
    """``Annotated`` metadata naming a field sensitive."""

    def __repr__(self) -> str:
        return "SENSITIVE"


SENSITIVE = _SensitiveMarker()

T = TypeVar("T")

if TYPE_CHECKING:
    Sensitive: TypeAlias = Annotated[T, SENSITIVE]
else:

    class Sensitive:
        """``Sensitive[X]``: a field holding ``X`` in clear for its handler, sealed elsewhere.

        It also accepts a :class:`SealedValue`, since that is what the orchestrator
        validates once the client has sealed it.
        """

        def __class_getitem__(cls, item: Any) -> Any:
            return Annotated[item | SealedValue, SENSITIVE]


def is_sealed(value: Any) -> bool:
    """True for a sealed envelope (a dict with exactly ``$keel_sealed`` and ``kid``)."""
    return (
        isinstance(value, dict)
        and set(value) == {SEALED_KEY, "kid"}
        and isinstance(value[SEALED_KEY], str)
        and isinstance(value["kid"], str)
    )


def _field_model(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds directly (``Model`` or ``Model | None``), else None."""
    candidates = typing.get_args(annotation) or (annotation,)
    for c in candidates:
        if isinstance(c, type) and issubclass(c, BaseModel) and c is not SealedValue:
            return c
    return None


def sensitive_paths(model: type[BaseModel] | None) -> dict[str, Any]:
    """The model's sensitive fields as a tree: ``{name: True}`` or ``{name: {nested...}}``.

    Keyed by the name used in JSON (the field's alias when it has one).
    """
    if model is None:
        return {}
    tree: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        key = info.alias or name
        extra = info.json_schema_extra
        flagged = isinstance(extra, dict) and bool(extra.get(SENSITIVE_FLAG))
        if flagged or any(m is SENSITIVE for m in info.metadata):
            tree[key] = True
            continue
        nested = _field_model(info.annotation)
        if nested is not None and nested is not model:
            sub = sensitive_paths(nested)
            if sub:
                tree[key] = sub
    return tree


@dataclass(frozen=True)
class SealKeys:
    """The deployment's sealing keys by id; ``current`` seals, every key opens."""

    keys: dict[str, bytes]
    current: str
    source: str

    def __repr__(self) -> str:
        return f"SealKeys(kids={sorted(self.keys)}, current={self.current!r})"

    def seal(self, value: Any) -> dict[str, str]:
        """The envelope of one JSON value, sealed with the current key."""
        if is_sealed(value):
            return dict(value)
        nonce = os.urandom(_NONCE_BYTES)
        plain = json.dumps(value, separators=(",", ":"), sort_keys=True).encode()
        box = AESGCM(self.keys[self.current]).encrypt(nonce, plain, self.current.encode())
        token = base64.urlsafe_b64encode(nonce + box).decode()
        return {SEALED_KEY: token, "kid": self.current}

    def unseal(self, envelope: dict[str, Any]) -> Any:
        """The value inside ``envelope``; ``InvalidInputError`` for an unknown key or a
        token that does not open (never showing the token)."""
        kid = envelope["kid"]
        key = self.keys.get(kid)
        if key is None:
            known = ", ".join(sorted(self.keys))
            raise InvalidInputError(
                f"sealed value uses key '{kid}', which {self.source} does not hold "
                f"(known: {known}); keep retired keys until no run holds their values"
            )
        try:
            raw = base64.urlsafe_b64decode(envelope[SEALED_KEY].encode())
            plain = AESGCM(key).decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], kid.encode())
            return json.loads(plain)
        except (InvalidTag, binascii.Error, ValueError) as exc:
            raise InvalidInputError(
                f"sealed value under key '{kid}' does not open ({type(exc).__name__})"
            ) from None

    def seal_fields(self, model: type[BaseModel] | None, data: Any) -> Any:
        """``data`` (decoded JSON for ``model``) with every sensitive field sealed."""
        return _apply(sensitive_paths(model), data, self.seal)

    def unseal_tree(self, value: Any) -> Any:
        """``value`` with every sealed envelope in it (at any depth) opened."""
        return _walk(value, self.unseal)


def _apply(paths: dict[str, Any], data: Any, fn: Any) -> Any:
    if not paths or not isinstance(data, dict):
        return data
    out = dict(data)
    for key, sub in paths.items():
        if key not in out or out[key] is None:
            continue
        out[key] = fn(out[key]) if sub is True else _apply(sub, out[key], fn)
    return out


def _walk(value: Any, fn: Any) -> Any:
    if is_sealed(value):
        return fn(value)
    if isinstance(value, dict):
        return {k: _walk(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v, fn) for v in value]
    return value


def mask(value: Any) -> Any:
    """``value`` with every sealed envelope replaced by ``***`` (display paths)."""
    return _walk(value, lambda _env: MASK)


def contains_sealed(value: Any) -> bool:
    if is_sealed(value):
        return True
    if isinstance(value, dict):
        return any(contains_sealed(v) for v in value.values())
    if isinstance(value, list):
        return any(contains_sealed(v) for v in value)
    return False


def parse_keys(text: str, source: str) -> SealKeys:
    """``kid:base64key`` entries (commas or new lines); the first one seals."""
    keys: dict[str, bytes] = {}
    order: list[str] = []
    for n, entry in enumerate(re.split(r"[,\n]", text), 1):
        entry = entry.strip()
        if not entry or entry.startswith("#"):
            continue
        kid, sep, b64 = entry.partition(":")
        kid = kid.strip()
        if not sep or not _KID.match(kid):
            raise ConfigError(
                f"{source}: entry {n} is not 'kid:base64key' (kid: 1-64 of A-Z a-z 0-9 . _ -)"
            )
        try:
            key = base64.urlsafe_b64decode(b64.strip().encode())
        except (binascii.Error, ValueError):
            key = b""
        if len(key) != 32:
            raise ConfigError(f"{source}: key '{kid}' is not 32 bytes of base64")
        if kid in keys:
            raise ConfigError(f"{source}: key id '{kid}' appears twice")
        keys[kid] = key
        order.append(kid)
    if not order:
        raise ConfigError(f"{source}: no key (expected 'kid:base64key')")
    return SealKeys(keys, order[0], source)


def new_key_entry(kid: str | None = None) -> str:
    """A fresh ``kid:base64key`` entry (for a key file or ``KEEL_SEAL_KEY``)."""
    kid = kid or f"k{secrets.token_hex(4)}"
    return f"{kid}:{base64.urlsafe_b64encode(AESGCM.generate_key(bit_length=256)).decode()}"


def _read(path: Path, what: str) -> SealKeys:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"cannot read {what} '{path}': {reason}") from None
    return parse_keys(text, f"{what} '{path}'")


def load_seal_keys(settings: Settings, *, create: bool = False) -> SealKeys:
    """The sealing keys: ``KEEL_SEAL_KEY``, ``KEEL_SEAL_KEY_FILE``, else
    ``<KEEL_HOME>/seal.keys`` (created, mode 0600, when ``create``; local development)."""
    if settings.seal_key is not None:
        return parse_keys(settings.seal_key.get_secret_value(), "KEEL_SEAL_KEY")
    if settings.seal_key_file is not None:
        return _read(settings.seal_key_file, "KEEL_SEAL_KEY_FILE")
    path = settings.home / DEFAULT_KEY_FILE
    if path.exists() or not create:
        if not path.exists():
            raise ConfigError(
                "no sealing key: set KEEL_SEAL_KEY or KEEL_SEAL_KEY_FILE (the same on every "
                f"client and worker); '{path}' does not exist"
            )
        return _read(path, "the seal key file")
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(new_key_entry() + "\n")
    log.warning(
        "sensitive fields: no KEEL_SEAL_KEY; created the key file %s (fine for local "
        "development; set KEEL_SEAL_KEY on every client and worker of a real deployment)",
        path,
    )
    return _read(path, "the seal key file")


class SealKeySource:
    """A process's sealing keys, handed to what opens and seals (the activity runner).

    Read from its settings on first use and kept: a worker whose tasks carry no sensitive
    field runs without a key, and a missing key fails the first task that needs one, with
    :func:`load_seal_keys`' message. ``SealKeySource(keys=...)`` gives fixed keys (tests,
    embedding); with neither settings nor keys, a task that needs a key fails for want of one.
    """

    def __init__(self, settings: Settings | None = None, *, keys: SealKeys | None = None) -> None:
        self._settings = settings
        self._keys = keys

    def get(self) -> SealKeys:
        """The keys; ``ConfigError`` when none are configured (tried again on the next call)."""
        if self._keys is None:
            if self._settings is None:
                raise ConfigError("no sealing key: this process was given no seal keys")
            self._keys = load_seal_keys(self._settings)
        return self._keys
