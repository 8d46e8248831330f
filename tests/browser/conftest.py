"""The browser stage: one headless Chromium (Debian's ``chromium`` driven by its
``chromedriver``, never a downloaded one) for the session, against a real stack: Kafka and
Redis from tests/conftest.py, and a real orchestrator, worker and connector for the
invoice review of tests/browser/ui_app.py, on the fake OpenAI-compatible model."""

from __future__ import annotations

import hashlib
import json
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.browser import ui_app

#: Where the tests' screenshots go: docs/ui.md shows them.
SHOTS = Path(__file__).resolve().parents[2] / "docs" / "ui"
CHROMIUM = "/usr/bin/chromium"
SECRET = f"ui-task-key-{uuid.uuid4().hex}{uuid.uuid4().hex}"
#: alice approves and operates; bob may look but decide nothing.
BEARERS = {name: f"bearer-{name}-{uuid.uuid4().hex}" for name in ("alice", "bob")}
ROLES = {"alice": ["finance-approver", "keel-operator"], "bob": ["auditor"]}


@pytest.fixture(scope="session")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One headless Chromium for the whole stage, with a profile of its own."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    driver_path = shutil.which("chromedriver")
    if driver_path is None or not Path(CHROMIUM).exists():
        pytest.fail("the browser stage needs Debian's chromium and chromium-driver (apt-get)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1280,900",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@dataclass
class Stack:
    settings: object
    client: object
    url: str
    model: object


@pytest.fixture(scope="module")
def stack(servers, request: pytest.FixtureRequest, tmp_path_factory) -> Iterator[Stack]:
    """Orchestrator, worker and connector of the UI test app on a prefix of their own."""
    from ops.fakes.openai_server import running
    from orchestrator.client.client import KeelClient
    from orchestrator.config.settings import Settings
    from orchestrator.io.kafka.topics import create_topics
    from tests.history_check import verify_after_test
    from tests.integration.test_connector import start_connector
    from tests.support import Services

    tmp = tmp_path_factory.mktemp("ui-stack")
    settings = Settings(
        bootstrap_servers=servers.bootstrap_servers,
        redis_url=servers.redis_url,
        topic_prefix=f"t{uuid.uuid4().hex[:12]}",
        partitions=4,
        replication_factor=1,
        home=tmp / "keel-home",
    )
    create_topics(settings)
    actors = {
        name: {"token_sha256": hashlib.sha256(BEARERS[name].encode()).hexdigest(), "roles": r}
        for name, r in ROLES.items()
    }
    (tmp / "actors.json").write_text(json.dumps(actors))
    with running() as model:
        services = Services(
            settings,
            tmp,
            KEEL_HOME=str(settings.home),  # the health page reads this stack's status files
            KEEL_TASK_TOKEN_SECRET=SECRET,
            KEEL_ACTORS_FILE=str(tmp / "actors.json"),
            KEEL_LLM_BASE_URL=model.api_root,
            KEEL_LLM_PRICE_INPUT_PER_MTOK="2.5",
            KEEL_LLM_PRICE_OUTPUT_PER_MTOK="10",
        )
        client = KeelClient(settings, ui_app.app)
        try:
            services.start("orchestrator", "--app", ui_app.APP)
            services.start("worker", "--app", ui_app.APP)
            _, url = start_connector(services, "--app", ui_app.APP)
            yield Stack(settings, client, url, model)
        finally:
            client.close()
            services.stop_all()
    verify_after_test(request, settings)
