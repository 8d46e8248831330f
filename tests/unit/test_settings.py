"""Settings come from KEEL_* variables and bad values are refused by name."""

from __future__ import annotations

import pytest

from orchestrator.config.settings import Settings, load_settings, redact
from orchestrator.domain.model.errors import ConfigError


def test_defaults_point_at_the_local_stack(monkeypatch):
    for var in ("KEEL_BOOTSTRAP_SERVERS", "KEEL_REDIS_URL", "KEEL_TOPIC_PREFIX", "KEEL_KAFKA_PORT"):
        monkeypatch.delenv(var, raising=False)
    s = load_settings()
    assert s.kafka_servers == "127.0.0.1:19092"
    assert s.redis == "redis://127.0.0.1:16379/0"
    assert s.topic("events") == "keel.events"
    assert s.partitions == 12


def test_environment_overrides(monkeypatch):
    monkeypatch.setenv("KEEL_BOOTSTRAP_SERVERS", "10.0.0.1:9092,10.0.0.2:9092")
    monkeypatch.setenv("KEEL_TOPIC_PREFIX", "tenant-a")
    monkeypatch.setenv("KEEL_PARTITIONS", "24")
    s = load_settings()
    assert s.kafka_servers == "10.0.0.1:9092,10.0.0.2:9092"
    assert s.topic("commands") == "tenant-a.commands"
    assert s.partitions == 24


@pytest.mark.parametrize(
    ("var", "value", "expected"),
    [
        (
            "KEEL_PARTITIONS",
            "0",
            "invalid setting KEEL_PARTITIONS=0: Input should be greater than or equal to 1",
        ),
        (
            "KEEL_TOPIC_PREFIX",
            "a b",
            "invalid setting KEEL_TOPIC_PREFIX=a b: String should match pattern '^[A-Za-z0-9._-]{1,200}$'",
        ),
        (
            "KEEL_REDIS_URL",
            "http://x",
            "invalid setting KEEL_REDIS_URL=http://x: Value error, must start with redis://, "
            "rediss://, unix://, redis+sentinel://, rediss+sentinel://, redis+cluster:// or "
            "rediss+cluster://",
        ),
        (
            "KEEL_KAFKA_BROKER_PROPERTIES",
            "num.io.threads",
            "invalid setting KEEL_KAFKA_BROKER_PROPERTIES=num.io.threads: Value error, "
            "'num.io.threads' is not key=value with a lower-case property key",
        ),
    ],
)
def test_bad_values_name_the_variable(monkeypatch, var, value, expected):
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert str(info.value) == expected


def test_unknown_topic_kind_is_an_error():
    with pytest.raises(KeyError):
        Settings().topic("nope")


def test_a_password_in_a_bad_url_is_never_echoed(monkeypatch):
    monkeypatch.setenv("KEEL_REDIS_URL", "http://keel:hunter2@redis.internal:6379/0")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert str(info.value) == (
        "invalid setting KEEL_REDIS_URL=http://keel:***@redis.internal:6379/0: "
        "Value error, must start with redis://, rediss://, unix://, redis+sentinel://, "
        "rediss+sentinel://, redis+cluster:// or rediss+cluster://"
    )


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("redis://:s3cret@h:6379/0", "redis://:***@h:6379/0"),
        ("rediss://default:p@ss@h/1", "rediss://default:***@h/1"),
        ("redis://h/0?password=s3cret&db=1", "redis://h/0?password=***&db=1"),
        (
            "SASL_SSL://alice:pw1@b1:9092,bob:pw2@b2:9092",
            "SASL_SSL://alice:***@b1:9092,bob:***@b2:9092",
        ),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("10.0.0.1:9092,10.0.0.2:9092", "10.0.0.1:9092,10.0.0.2:9092"),
    ],
)
def test_redact_hides_passwords_and_keeps_the_rest(text, shown):
    assert redact(text) == shown


def test_logs_redact_passwords_and_refuse_a_bad_level(monkeypatch):
    import json
    import logging

    from orchestrator.telemetry.logs import JsonFormatter, configure_logging

    record = logging.LogRecord(
        "keel.test", logging.ERROR, __file__, 1, "cannot reach %s", ("redis://:pw@h/0",), None
    )
    assert json.loads(JsonFormatter().format(record))["msg"] == "cannot reach redis://:***@h/0"
    monkeypatch.setenv("KEEL_LOG_LEVEL", "loud")
    with pytest.raises(ConfigError) as info:
        configure_logging()
    assert str(info.value) == (
        "invalid setting KEEL_LOG_LEVEL=loud: expected one of debug, info, warning, error, critical"
    )


def test_extra_broker_properties_reach_the_local_broker_and_topology_keys_are_refused(tmp_path):
    from ops.local import InfraError, LocalStack

    props = "transaction.partition.verification.enable=false; num.io.threads = 4"
    stack = LocalStack(Settings(home=tmp_path, kafka_broker_properties=props))
    lines = stack._server_properties(1).splitlines()
    assert "transaction.partition.verification.enable=false" in lines
    assert "num.io.threads=4" in lines
    assert "listeners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093" in lines

    bad = LocalStack(Settings(home=tmp_path, kafka_broker_properties="log.dirs=/tmp/x;node.id=7"))
    with pytest.raises(InfraError) as info:
        bad._server_properties(1)
    assert str(info.value) == (
        "KEEL_KAFKA_BROKER_PROPERTIES may not set log.dirs, node.id: "
        "keel infra lays out the cluster itself"
    )


def test_a_child_environment_points_at_these_settings_and_drops_the_callers_keel_vars(
    monkeypatch,
):
    monkeypatch.setenv("KEEL_TOPIC_PREFIX", "elsewhere")
    monkeypatch.setenv("KEEL_INSTANCE_ID", "parent")
    monkeypatch.setenv("KEEL_FETCH_WAIT_MAX_MS", "7")  # client tuning: measured in children
    monkeypatch.setenv("PATH", "/usr/bin")
    s = Settings(
        bootstrap_servers="10.0.0.1:9092", redis_url="redis://r:1/0", topic_prefix="t", partitions=4
    )
    env = s.child_environment(KEEL_LOG_LEVEL="WARNING", KEEL_PARTITIONS="8")
    assert {k: v for k, v in env.items() if k.startswith("KEEL_")} == {
        "KEEL_BOOTSTRAP_SERVERS": "10.0.0.1:9092",
        "KEEL_REDIS_URL": "redis://r:1/0",
        "KEEL_TOPIC_PREFIX": "t",
        "KEEL_PARTITIONS": "8",
        "KEEL_LOG_LEVEL": "WARNING",
        "KEEL_FETCH_WAIT_MAX_MS": "7",
    }
    assert env["PATH"] == "/usr/bin"


def test_every_keel_variable_of_the_product_is_read_through_settings(monkeypatch):
    """No product module reads a ``KEEL_*`` variable from the environment itself: each is a
    field of ``Settings`` (the examples read their own fakes' URLs; ``ops/`` are tools)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    read = re.compile(r"(os\.environ|getenv)[^\n]*KEEL_")
    found = [
        f"{path.relative_to(root)}:{n}"
        for top in ("orchestrator", "handlers", "connectors")
        for path in sorted((root / top).rglob("*.py"))
        if "examples" not in path.relative_to(root).parts
        and path.relative_to(root).as_posix() != "orchestrator/config/settings.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if read.search(line)
    ]
    assert found == []


def test_the_tuning_and_service_knobs_are_settings(monkeypatch):
    from orchestrator.io.kafka.clients import consumer_config, producer_config
    from orchestrator.telemetry.logs import log_level

    s = Settings()
    assert (s.fetch_wait_max_ms, s.linger_ms, s.batched_linger_ms) == (100, 1.0, 50.0)
    assert (s.status_interval_s, s.log_level, s.trace_file) == (5.0, "info", None)
    assert s.adapter_hooks == ""
    monkeypatch.setenv("KEEL_FETCH_WAIT_MAX_MS", "7")
    monkeypatch.setenv("KEEL_LINGER_MS", "2.5")
    monkeypatch.setenv("KEEL_LOG_LEVEL", " Warning ")
    monkeypatch.setenv("KEEL_TRACE_FILE", "")
    s = load_settings()
    assert consumer_config(s, "g")["fetch.wait.max.ms"] == 7
    assert producer_config(s)["linger.ms"] == 2.5
    assert s.trace_file is None
    assert log_level(None, s) == log_level(None) == 30
    monkeypatch.setenv("KEEL_STATUS_INTERVAL_S", "0")
    with pytest.raises(ConfigError, match="KEEL_STATUS_INTERVAL_S=0: Input should be greater"):
        load_settings()


@pytest.mark.parametrize(
    ("var", "value", "expected"),
    [
        (
            "KEEL_REDIS_URL",
            "redis://127.0.0.1:notaport/0",
            "KEEL_REDIS_URL=redis://127.0.0.1:notaport/0: Value error, the port 'notaport' is "
            "not a number from 1 to 65535",
        ),
        (
            "KEEL_REDIS_URL",
            "redis://:pw@h:70000/0",
            "KEEL_REDIS_URL=redis://:***@h:70000/0: Value error, the port '70000' is not a "
            "number from 1 to 65535",
        ),
        (
            "KEEL_REDIS_URL",
            "redis://h:6379/zero",
            "KEEL_REDIS_URL=redis://h:6379/zero: Value error, the database 'zero' (the path) is "
            "not a number",
        ),
        (
            "KEEL_REDIS_URL",
            "rediss://h/0?socket_timeout=soon",
            "KEEL_REDIS_URL=rediss://h/0?socket_timeout=soon: Value error, "
            "?socket_timeout='soon' is not a number",
        ),
        (
            "KEEL_REDIS_URL",
            "unix://",
            "KEEL_REDIS_URL=unix://: Value error, a unix:// URL needs the socket's path, e.g. "
            "unix:///run/redis.sock",
        ),
        (
            "KEEL_REDIS_URL",
            "redis+sentinel://:S3cr3t@s1:26379,s2:99999/mymaster/0",
            "KEEL_REDIS_URL=redis+sentinel://:***@s1:26379,s2:99999/mymaster/0: Value error, "
            "the port '99999' is not a number from 1 to 65535",
        ),
        (
            "KEEL_REDIS_URL",
            "redis+sentinel://s1:26379/mymaster/0?sentinel_password=S3cr3t&db=1",
            "KEEL_REDIS_URL=redis+sentinel://s1:26379/mymaster/0?sentinel_password=***&db=1: "
            "Value error, ?db is not an option of a redis+sentinel:// URL (it takes only "
            "sentinel_password)",
        ),
        (
            "KEEL_GC_THRESHOLDS",
            "not json",
            "KEEL_GC_THRESHOLDS=not json: Value error, must be a JSON array of three integers, "
            "e.g. [700, 10, 10]",
        ),
        ("KEEL_GC_THRESHOLDS", "[700, 10]", "KEEL_GC_THRESHOLDS (item 2): Field required"),
        (
            "KEEL_BOOTSTRAP_SERVERS",
            "b1:9092,b2:0",
            "KEEL_BOOTSTRAP_SERVERS=b1:9092,b2:0: Value error, 'b2:0': the port must be 1 to 65535",
        ),
        (
            "KEEL_BOOTSTRAP_SERVERS",
            "S3cr3t@b1:9092",
            "KEEL_BOOTSTRAP_SERVERS=***@b1:9092: Value error, '***@b1:9092' holds credentials, "
            "which Kafka does not take in a bootstrap server: give host:port, and "
            "KEEL_KAFKA_SASL_USERNAME and KEEL_KAFKA_SASL_PASSWORD (docs/operations.md)",
        ),
        (
            "KEEL_BOOTSTRAP_SERVERS",
            "user%3AS3cr3t@b1:9092",
            "KEEL_BOOTSTRAP_SERVERS=***@b1:9092: Value error, '***@b1:9092' holds credentials, "
            "which Kafka does not take in a bootstrap server: give host:port, and "
            "KEEL_KAFKA_SASL_USERNAME and KEEL_KAFKA_SASL_PASSWORD (docs/operations.md)",
        ),
    ],
)
def test_every_url_port_and_json_knob_is_checked_at_load(monkeypatch, var, value, expected):
    """Issue 44: these failed later, as tracebacks (``Port could not be cast``, a
    ``SettingsError``), or printed the credential."""
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert str(info.value) == f"invalid setting {expected}"
    assert "S3cr3t" not in str(info.value)


def test_good_redis_urls_and_thresholds_load(monkeypatch):
    for url in (
        "redis://[::1]:6379/0",
        "rediss://:pw@h/1?db=2&socket_timeout=0.5",
        "unix:///r.sock",
        "redis+sentinel://:pw@10.0.0.1:26379,10.0.0.2/mymaster/1",
        "rediss+sentinel://[::1]:26379/keel?sentinel_password=x",
    ):
        monkeypatch.setenv("KEEL_REDIS_URL", url)
        assert load_settings().redis_url == url
    monkeypatch.setenv("KEEL_GC_THRESHOLDS", "[700, 10, 10]")
    assert load_settings().gc_thresholds == (700, 10, 10)


def _mode(path) -> int:
    import stat

    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("first", ["task_tokens", "seal_keys", "status"])
def test_keel_home_is_created_0700_by_whichever_process_creates_it_first(tmp_path, first):
    """KEEL_HOME holds key files, status and logs: only its owner may enter it, whichever
    product path makes it (docs/local-infra.md); one the user made keeps its mode."""
    from orchestrator.runtime.health import StatusFile
    from orchestrator.trust.human_task_tokens import load_task_tokens
    from orchestrator.trust.sealing import load_seal_keys

    home = tmp_path / "new" / "home"
    settings = Settings(home=home)
    make = {
        "task_tokens": lambda: load_task_tokens(settings),
        "seal_keys": lambda: load_seal_keys(settings, create=True),
        "status": lambda: StatusFile(home / "status" / "x.json", dict).maybe_write(force=True),
    }
    make[first]()
    assert (_mode(tmp_path / "new"), _mode(home)) == (0o700, 0o700)
    assert all(_mode(d) == 0o700 for d in home.iterdir() if d.is_dir())


def test_a_keel_home_the_user_made_keeps_its_mode(tmp_path):
    from orchestrator.config.settings import private_dir

    home = tmp_path / "home"
    home.mkdir(mode=0o750)
    home.chmod(0o750)
    private_dir(home / "status")
    assert (_mode(home), _mode(home / "status")) == (0o750, 0o700)


def test_two_settings_models_read_the_environment_as_docs_configuration_says():
    """``Settings`` and ``LlmSettings`` (``KEEL_LLM_*``) and no other (docs/configuration.md)."""
    import re
    from pathlib import Path

    from handlers.llm.llm_settings import LlmSettings

    root = Path(__file__).resolve().parents[2]
    models = sorted(
        f"{path.relative_to(root)}:{m[1]}"
        for top in ("orchestrator", "handlers", "connectors")
        for path in (root / top).rglob("*.py")
        for m in re.finditer(r"^class (\w+)\(BaseSettings\)", path.read_text(), re.MULTILINE)
    )
    assert models == [
        "handlers/llm/llm_settings.py:LlmSettings",
        "orchestrator/config/settings.py:Settings",
    ]
    assert LlmSettings.model_config["env_prefix"] == "KEEL_LLM_"
    assert not any(name.startswith("llm_") for name in Settings.model_fields)
    doc = (root / "docs" / "configuration.md").read_text()
    assert "`Settings` (`orchestrator/config/settings.py`)" in doc
    assert "`LlmSettings` (`handlers/llm/llm_settings.py`)" in doc
