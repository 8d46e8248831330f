"""Redaction (orchestrator/config/redaction.py): every credential form masked, in time linear in the
text's length, whatever the text (issue 44: an 8,000-character path took 0.9 s)."""

from __future__ import annotations

import time

import pytest

from orchestrator.config.redaction import clip, mask_servers, redact


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("redis://:s3cret@h:6379/0", "redis://:***@h:6379/0"),
        ("rediss://default:p@ss@h/1", "rediss://default:***@h/1"),
        ("redis://S3cr3t@h/0", "redis://***@h/0"),
        ("redis://h/0?password=s3cret&db=1", "redis://h/0?password=***&db=1"),
        (
            "redis+sentinel://:s3cret@s1:26379,s2/mymaster/0?sentinel_password=S2",
            "redis+sentinel://:***@s1:26379,s2/mymaster/0?sentinel_password=***",
        ),
        ("redis+cluster://keel:s3cret@n1:7000,n2/", "redis+cluster://keel:***@n1:7000,n2/"),
        (
            "SASL_SSL://alice:pw1@b1:9092,bob:pw2@b2:9092",
            "SASL_SSL://alice:***@b1:9092,bob:***@b2:9092",
        ),
        ("KEEL_BOOTSTRAP_SERVERS=S3cr3t@host:9092", "KEEL_BOOTSTRAP_SERVERS=***@host:9092"),
        ("'S3cr3t@host:9092' holds credentials", "'***@host:9092' holds credentials"),
        ("'user%3AS3cr3t@host:9092'", "'user%3A***@host:9092'"),
        ("{'sasl.password': 'a b', 'acks': 'all'}", "{'sasl.password': '***', 'acks': 'all'}"),
        ('SSL.KEYSTORE.PASSWORD = "q";x', 'SSL.KEYSTORE.PASSWORD = "***";x'),
        ("sasl.password='unclosed rest", "sasl.password=*** rest"),
        ("KEEL_KAFKA_SASL_PASSWORD=hunter2 next", "KEEL_KAFKA_SASL_PASSWORD=*** next"),
        ("KEEL_KAFKA_SASL_PASSWORD: only with SASL", "KEEL_KAFKA_SASL_PASSWORD: only with SASL"),
        ("mail alice@example.com", "mail alice@example.com"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("10.0.0.1:9092,10.0.0.2:9092", "10.0.0.1:9092,10.0.0.2:9092"),
    ],
)
def test_every_credential_form_is_masked_and_the_rest_kept(text: str, shown: str) -> None:
    assert redact(text) == shown


def test_a_bootstrap_address_is_masked_before_each_servers_last_at() -> None:
    assert mask_servers("b1:9092,S3cr3t@b2:9092,u%3Ap@w@b3:9092") == (
        "b1:9092,***@b2:9092,***@b3:9092"
    )


#: Texts that made the old patterns rescan the rest of the line from every position.
ADVERSARIAL = {
    "a path": lambda n: "/ui/runs/" + "x" * n + "/cancel",
    "one long id": lambda n: "a" * n,
    "colons": lambda n: "a:" * (n // 2),
    "at signs": lambda n: "@" * n,
    "user:pass@ pairs": lambda n: "a:b@" * (n // 4),
    "secret@host:port tokens": lambda n: "x@y:1 " * (n // 6),
    "unclosed quoted passwords": lambda n: "sasl.password='" * (n // 15),
    "properties without a value": lambda n: "sasl.password " * (n // 14),
    "query keys": lambda n: "?password=" * (n // 10),
}


def _seconds(text: str) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        redact(text)
        best = min(best, time.perf_counter() - start)
    return best


@pytest.mark.parametrize("kind", sorted(ADVERSARIAL))
def test_redaction_is_linear_in_the_texts_length(kind: str) -> None:
    make = ADVERSARIAL[kind]
    small, large = _seconds(make(10_000)), _seconds(make(100_000))
    assert large < 1.0, f"{kind}: 100k characters took {large:.3f} s"  # quadratic: minutes
    # ten times the text: about ten times the time; quadratic would be a hundred
    assert large < 30 * max(small, 0.002), f"{kind}: {small:.4f} s -> {large:.4f} s"


def test_a_long_value_is_clipped_with_its_length() -> None:
    assert clip("x" * 200) == "x" * 200
    assert clip("x" * 100_000) == "x" * 200 + "... (100,000 characters)"
