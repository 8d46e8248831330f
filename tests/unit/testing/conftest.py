"""The kit's own tests run the small order application of ``kit_app``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from orchestrator.testing import WorkflowEnvironment
from tests.unit.testing.kit_app import LEDGER, app


@pytest.fixture
def env() -> Iterator[WorkflowEnvironment]:
    LEDGER.clear()
    with WorkflowEnvironment(app) as environment:
        yield environment
