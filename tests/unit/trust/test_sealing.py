"""Sealing sensitive fields: envelopes, rotation, key loading, masking, the worker side."""

from __future__ import annotations

import asyncio
import hashlib
import json
import stat

import pytest
from pydantic import BaseModel, Field, SecretStr

from handlers import execution
from handlers.execution import BadTaskInput, parse_input, result_json
from orchestrator.application.app import KeelApp
from orchestrator.config.settings import Settings, load_settings
from orchestrator.domain.model.errors import ConfigError, InvalidInputError
from orchestrator.trust.sealing import (
    MASK,
    SEALED_KEY,
    SealedValue,
    SealKeySource,
    Sensitive,
    is_sealed,
    load_seal_keys,
    mask,
    new_key_entry,
    parse_keys,
    sensitive_paths,
)


class Creds(BaseModel):
    token: str | SealedValue = Field(json_schema_extra={"keel_sensitive": True})
    user: str


class Call(BaseModel):
    name: str
    api_key: Sensitive[str]
    creds: Creds | None = None


class Used(BaseModel):
    digest: str
    echo: Sensitive[str]


def test_sensitive_fields_are_found_by_marker_flag_and_nesting():
    assert sensitive_paths(Call) == {"api_key": True, "creds": {"token": True}}
    assert sensitive_paths(Used) == {"echo": True}
    assert sensitive_paths(None) == {}


def test_seal_fields_seals_only_sensitive_values_and_the_model_accepts_them():
    keys = parse_keys(new_key_entry("a"), "test")
    data = {"name": "n", "api_key": "sek", "creds": {"token": "t", "user": "u"}}
    sealed = keys.seal_fields(Call, data)
    assert sealed["name"] == "n" and sealed["creds"]["user"] == "u"
    assert is_sealed(sealed["api_key"]) and is_sealed(sealed["creds"]["token"])
    assert "sek" not in json.dumps(sealed)
    model = Call.model_validate(sealed)  # the orchestrator validates the sealed input
    assert "sek" not in repr(model)
    assert model.model_dump(mode="json")["api_key"] == sealed["api_key"]
    assert keys.unseal_tree(sealed) == data
    assert mask(sealed) == {"name": "n", "api_key": MASK, "creds": {"token": MASK, "user": "u"}}


def test_rotation_the_first_key_seals_and_old_keys_still_open():
    old = parse_keys(new_key_entry("old"), "test")
    sealed_old = old.seal("v1")
    old_entry = new_key_entry("old")
    rotated = parse_keys(f"{new_key_entry('new')},{old_entry}", "test")
    assert rotated.current == "new"
    assert rotated.seal("x")["kid"] == "new"
    kept = parse_keys(old_entry, "test")
    assert rotated.unseal(kept.seal("v0")) == "v0"
    with pytest.raises(InvalidInputError, match="does not open"):
        rotated.unseal(sealed_old)  # same kid, other key material: authentication fails


def test_an_unknown_key_id_is_a_clear_error_without_the_token():
    keys = parse_keys(new_key_entry("a"), "KEEL_SEAL_KEY")
    env = {SEALED_KEY: "c2VjcmV0", "kid": "gone"}
    with pytest.raises(InvalidInputError) as err:
        keys.unseal(env)
    assert str(err.value) == (
        "sealed value uses key 'gone', which KEEL_SEAL_KEY does not hold (known: a); "
        "keep retired keys until no run holds their values"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "KEEL_SEAL_KEY: no key (expected 'kid:base64key')"),
        ("nokey", "KEEL_SEAL_KEY: entry 1 is not 'kid:base64key' (kid: 1-64 of A-Z a-z 0-9 . _ -)"),
        ("a:c2hvcnQ=", "KEEL_SEAL_KEY: key 'a' is not 32 bytes of base64"),
    ],
)
def test_bad_keys_are_refused_in_one_line(text, message):
    with pytest.raises(ConfigError) as err:
        parse_keys(text, "KEEL_SEAL_KEY")
    assert str(err.value) == message


def test_a_bad_seal_key_setting_never_echoes_the_value(monkeypatch):
    monkeypatch.setenv("KEEL_SEAL_KEY", "")
    s = load_settings()
    assert s.seal_key is not None and "SecretStr" in repr(s.seal_key)
    secret = new_key_entry("z")
    assert secret not in repr(load_settings(seal_key=secret))


def test_the_local_key_file_is_created_private_and_reused(tmp_path):
    settings = Settings(home=tmp_path / "home")
    with pytest.raises(ConfigError, match="no sealing key"):
        load_seal_keys(settings)
    first = load_seal_keys(settings, create=True)
    path = tmp_path / "home" / "seal.keys"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_seal_keys(settings).keys == first.keys
    env = Settings(home=tmp_path, seal_key=SecretStr(new_key_entry("e")))
    assert load_seal_keys(env).current == "e"


def test_the_worker_opens_the_input_and_seals_the_output():
    keys = parse_keys(new_key_entry("w"), "test")
    given = SealKeySource(keys=keys)
    app = KeelApp("t")
    seen = {}

    @app.activity("use", input=Call, output=Used)
    def use(call: Call) -> dict[str, str]:
        seen["key"] = call.api_key
        return {"digest": hashlib.sha256(call.api_key.encode()).hexdigest(), "echo": call.api_key}

    handler = app.handler("use")
    sealed = json.dumps(keys.seal_fields(Call, {"name": "n", "api_key": "sek"}))
    arg = parse_input(handler, sealed, given)
    raw = asyncio.run(execution.call(handler, arg))
    assert seen["key"] == "sek"
    text = result_json(handler, raw, side_effect=False, seal_keys=given)
    assert "sek" not in text
    out = json.loads(text)
    assert keys.unseal(out["echo"]) == "sek"
    other = SealKeySource(keys=parse_keys(new_key_entry("x"), "KEEL_SEAL_KEY"))
    with pytest.raises(BadTaskInput, match="key 'w', which KEEL_SEAL_KEY does not hold"):
        parse_input(handler, sealed, other)
