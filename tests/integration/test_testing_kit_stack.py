"""The test kit's real stack: docs/testing.md's integration example runs as written on the
session's Kafka and Redis (what the ``keel_stack`` fixture hands a user's test)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.testing.real_stack import RealStack
from tests.unit.testing.test_testing_page import run_page


def test_the_pages_integration_example_passes_on_the_real_stack(servers, tmp_path: Path) -> None:
    namespace = run_page()
    stack = RealStack(servers.bootstrap_servers, servers.redis_url, "environment")
    namespace["test_a_big_order_on_kafka_and_redis"](
        keel_stack=stack, keel_app=namespace["app"], tmp_path=tmp_path
    )
