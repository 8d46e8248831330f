"""The operator web UI in a real browser (issue 34): headless Chromium against a real
orchestrator, worker and connector on real Kafka and Redis (tests/browser/conftest.py).

The tests run in this file's order on one stack and one browser: refused while signed out,
sign in, filter the runs, approve a task and see its run move on while a second tab's
stale approval is refused, read the run's timeline, redrive a dead letter once, read the
health page. Each saves the screenshot docs/ui.md shows.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from orchestrator.client.dead_letters import DeadLetters
from tests.browser import ui_app
from tests.browser.conftest import BEARERS, SHOTS
from tests.support import produce, wait_until

APPROVED = "inv-ui-2026-0042"
CANCELLED = "inv-ui-2026-0043"
SUPPLIERS = {APPROVED: "ACME Tools", CANCELLED: "Globex Paper"}
TOKENS = {"prompt": 31, "completion": 7}
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def shot(browser: Any, name: str) -> None:
    """The whole page (up to 2400 px high) as docs/ui/<name>.png."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1280, max(600, min(int(height) + 140, 2400)))
    try:
        browser.save_screenshot(str(SHOTS / f"{name}.png"))
    finally:
        browser.set_window_size(1280, 900)


def until(browser: Any, check: Callable[[Any], Any], what: str, timeout_s: float = 60) -> Any:
    return WebDriverWait(browser, timeout_s, 0.2).until(check, message=what)


def refreshed_until(
    browser: Any, check: Callable[[], Any], what: str, timeout_s: float = 90
) -> Any:
    """Reload the page until ``check()`` holds (a page shows what was true when it loaded)."""

    def again() -> Any:
        found = check()
        if not found:
            browser.refresh()
        return found

    return wait_until(again, timeout_s, what, 0.5)


def flash(browser: Any) -> tuple[str, str]:
    """(level, text) of the page's one-time message."""
    el = until(browser, lambda b: b.find_element(By.CSS_SELECTOR, "p.flash"), "a message")
    level = "ok" if "ok" in el.get_attribute("class").split() else "refused"
    return level, el.text


def sign_in(browser: Any, url: str, token: str) -> None:
    browser.get(f"{url}/ui/signin")
    browser.find_element(By.ID, "token").send_keys(token)
    browser.find_element(By.ID, "signin").click()


def post(url: str, data: bytes, headers: dict[str, str]) -> tuple[int, str]:
    req = urllib.request.Request(url, data=data, method="POST", headers=headers)
    try:
        with _NO_PROXY.open(req, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def alice(browser, stack) -> Any:
    """The browser, signed in as alice (once: the session cookie stays)."""
    browser.get(f"{stack.url}/ui/runs")
    if not browser.find_elements(By.ID, "who"):
        sign_in(browser, stack.url, BEARERS["alice"])
        until(browser, lambda b: b.find_element(By.ID, "who"), "signed in")
    return browser


@pytest.fixture(scope="module")
def runs(stack) -> dict[str, Any]:
    """Two reviews waiting for approval; the second then cancelled."""
    usage = {"prompt_tokens": TOKENS["prompt"], "completion_tokens": TOKENS["completion"]}
    stack.model.script(
        [
            {
                "match": " of Globex Paper",
                "json": {"category": "paper", "confidence": 0.9},
                **usage,
            },
        ],
        # every other invoice (a scripted response answers once; the default always)
        default={"json": {"category": "tools", "confidence": 0.93}, **usage},
    )
    client = stack.client
    for wf, supplier in SUPPLIERS.items():
        client.start(
            "invoice_review",
            {"invoice_number": wf, "supplier": supplier, "amount": 1250.0},
            wf,
            version=1,  # v2 is deployed too: the migration's dry run shows moving a run to it
        )
    for wf in SUPPLIERS:
        wait_until(
            lambda wf=wf: client.projection.get(wf)["state"] == "approval", 90, f"{wf} waits"
        )
    client.cancel(CANCELLED, "duplicate invoice")
    wait_until(lambda: client.projection.status(CANCELLED) == "cancelled", 60, "the cancel")
    return {wf: client.show(wf) for wf in SUPPLIERS}


def test_signed_out_a_page_sends_to_sign_in_and_an_action_is_refused(browser, stack):
    browser.delete_all_cookies()
    browser.get(f"{stack.url}/ui/runs?status=running")
    until(browser, lambda b: b.find_elements(By.ID, "token"), "the sign-in form")
    assert browser.current_url == f"{stack.url}/ui/signin?next=/ui/runs?status%3Drunning"
    shot(browser, "signin")

    status, body = post(f"{stack.url}/ui/dlq/any-letter/redrive", b"csrf=x", {})
    assert status == 403
    assert "sign in first: this action needs a session" in body

    sign_in(browser, stack.url, "not-a-token-of-anyone")
    error = until(browser, lambda b: b.find_element(By.ID, "signin-error"), "the refusal")
    assert error.text == "unknown token: sign in with your actor's bearer token"
    assert browser.get_cookie("keel_ui_session") is None


def test_sign_in_then_a_post_without_the_csrf_token_is_refused(browser, stack):
    browser.delete_all_cookies()
    browser.get(f"{stack.url}/ui/runs?status=running")  # back there after signing in
    browser.find_element(By.ID, "token").send_keys(BEARERS["alice"])
    browser.find_element(By.ID, "signin").click()
    who = until(browser, lambda b: b.find_element(By.ID, "who"), "signed in")
    assert who.text == "alice (finance-approver, keel-operator)"
    assert browser.current_url == f"{stack.url}/ui/runs?status=running"
    cookie = browser.get_cookie("keel_ui_session")
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"

    session = {"Cookie": f"keel_ui_session={cookie['value']}"}
    status, body = post(f"{stack.url}/ui/runs/{APPROVED}/cancel", b"reason=x", session)
    assert status == 403
    assert "the form&#39;s CSRF token is missing or wrong; reload the page" in body
    status, body = post(f"{stack.url}/ui/runs/{APPROVED}/cancel", b"csrf=forged&reason=x", session)
    assert status == 403


def test_the_runs_filtered_by_a_search_attribute_or_status_show_the_expected_run(
    browser, alice, stack, runs
):
    browser.get(f"{stack.url}/ui/runs")
    browser.find_element(By.ID, "attr-0").send_keys("supplier=ACME Tools")
    browser.find_element(By.ID, "filter").click()
    until(browser, lambda b: "attr=supplier" in b.current_url, "the filter")
    rows = browser.find_elements(By.CSS_SELECTOR, "#runs tbody tr[data-workflow-id]")
    assert [r.get_attribute("data-workflow-id") for r in rows] == [APPROVED]
    assert browser.find_element(By.ID, "matching").text == "1 run(s) match"
    cells = [c.text for c in rows[0].find_elements(By.TAG_NAME, "td")]
    row = stack.client.projection.get(APPROVED)
    assert cells[:5] == [APPROVED, "invoice_review", "1", "waiting", "approval"]
    assert cells[5].startswith(time.strftime("%Y-%m-%dT", time.gmtime(row["started_at"] / 1000)))
    assert cells[6] == ""  # not ended
    assert cells[8] == f"amount=1250.0 invoice_number={APPROVED} supplier=ACME Tools"
    assert browser.find_element(By.CSS_SELECTOR, '[data-count="waiting"]').text == "1"
    assert browser.find_element(By.CSS_SELECTOR, '[data-count="cancelled"]').text == "1"
    shot(browser, "runs")

    browser.get(f"{stack.url}/ui/runs")
    Select(browser.find_element(By.ID, "status")).select_by_value("cancelled")
    browser.find_element(By.ID, "attr-0").send_keys("amount>=1000")
    browser.find_element(By.ID, "filter").click()
    until(browser, lambda b: "status=cancelled" in b.current_url, "the filter")
    rows = browser.find_elements(By.CSS_SELECTOR, "#runs tbody tr[data-workflow-id]")
    assert [r.get_attribute("data-workflow-id") for r in rows] == [CANCELLED]

    browser.get(f"{stack.url}/ui/runs?attr=colour%3Dred")
    assert browser.find_element(By.ID, "refusal").text == (
        "--attr colour=red: unknown search attribute 'colour' "
        "(declared: amount, invoice_number, supplier)"
    )


def test_approving_in_the_inbox_moves_the_run_on_and_a_stale_tab_is_refused(
    browser, alice, stack, runs
):
    browser.get(f"{stack.url}/ui/tasks")
    rows = browser.find_elements(By.CSS_SELECTOR, "#tasks tbody tr[data-task-id]")
    assert [r.get_attribute("data-workflow-id") for r in rows] == [APPROVED]
    shot(browser, "inbox")
    rows[0].find_element(By.CSS_SELECTOR, "td a").click()
    digest = until(browser, lambda b: b.find_element(By.ID, "digest"), "the task page").text
    task = runs[APPROVED].human_tasks[0]
    assert browser.find_element(By.ID, "task-id").text == task["task_id"]
    opened = next(h for h in runs[APPROVED].history if h["type"] == "HumanTaskOpened")
    assert digest == opened["data"]["operation_digest"]
    assert '"category": "tools"' in browser.find_element(By.ID, "evidence").text
    assert browser.find_element(By.ID, "sla").text.startswith("in ")
    shot(browser, "task")

    first = browser.current_window_handle
    browser.switch_to.new_window("tab")
    browser.get(f"{stack.url}/ui/tasks/{quote(task['task_id'], safe='')}")
    second = browser.current_window_handle
    until(browser, lambda b: b.find_element(By.ID, "approve"), "the second tab's form")

    browser.switch_to.window(first)
    browser.find_element(By.ID, "approve").click()
    level, text = flash(browser)
    assert (level, text) in {
        ("ok", f"approve of task {task['task_id']} recorded by alice for operation {digest[:12]}…"),
        ("ok", "approve sent; the orchestrator has not answered yet: reload"),
    }
    wait_until(lambda: stack.client.projection.status(APPROVED) == "completed", 90, "the run")
    browser.get(f"{stack.url}/ui/runs/{APPROVED}")
    assert browser.find_element(By.ID, "run-status").text == "completed"
    assert '"decided_by": "alice"' in browser.find_element(By.ID, "run-output").text

    browser.switch_to.window(second)
    browser.find_element(By.ID, "approve").click()
    level, text = flash(browser)
    assert (level, text) == (
        "refused",
        "refused: 'alice' already decided approve on this task; the first result stands "
        "(reload the task to see it as it is now)",
    )
    shot(browser, "stale-approval")
    browser.close()
    browser.switch_to.window(first)


def test_a_run_shows_its_timeline_in_order_with_the_llm_call(browser, alice, stack, runs):
    view = stack.client.show(APPROVED)
    browser.get(f"{stack.url}/ui/runs/{APPROVED}")
    items = browser.find_elements(By.CSS_SELECTOR, "#timeline > li")
    assert [(int(i.get_attribute("data-seq")), i.get_attribute("data-type")) for i in items] == [
        (h["seq"], h["type"]) for h in view.history
    ]
    types = [i.get_attribute("data-type") for i in items]
    assert types[:2] == ["WorkflowStarted", "StateEntered"]
    assert types[-1] == "WorkflowCompleted"
    llm = browser.find_elements(By.CSS_SELECTOR, "#timeline > li.kind-llm")
    assert len(llm) == 1
    detail = {
        d.get_attribute("data-detail"): d.text for d in llm[0].find_elements(By.TAG_NAME, "dd")
    }
    assert detail["tokens"] == "prompt 31, completion 7, total 38"
    assert detail["model"] == ui_app.MODEL
    assert detail["prompt"] == "classify_invoice@1"
    assert detail["validation"] == "valid, 0 repair(s)"
    assert detail["cost"] == f"${view.llm['cost_usd']:.6f}" and view.llm["cost_usd"] > 0
    decided = browser.find_element(By.CSS_SELECTOR, '#timeline > li[data-type="HumanTaskDecided"]')
    assert "approve by alice" in decided.text
    states = browser.find_elements(By.CSS_SELECTOR, '#timeline > li[data-type="StateEntered"]')
    assert [s.find_element(By.TAG_NAME, "strong").text for s in states] == [
        "entered state classify",
        "entered state approval",
        "entered state paid",
    ]
    assert all(s.find_elements(By.CSS_SELECTOR, '[data-detail="time in state"]') for s in states)
    assert f'"invoice_number": "{APPROVED}"' in browser.find_element(By.ID, "run-input").text
    shot(browser, "run")


def test_a_dead_letter_is_redriven_once_and_a_second_click_is_refused(browser, alice, stack):
    produce(stack.settings, "commands", [(b"ui-poison-1", b"\x00 not a Keel record")])
    letter = wait_until(
        lambda: next(iter(DeadLetters(stack.settings).letters(include_closed=False)), None),
        90,
        "the poison command's dead letter",
    )
    browser.get(f"{stack.url}/ui/dlq")
    row = f'#letters tr[data-letter-id="{letter.id}"]'
    until(browser, lambda b: b.find_elements(By.CSS_SELECTOR, row), "the letter listed")
    first = browser.current_window_handle
    browser.switch_to.new_window("tab")
    browser.get(f"{stack.url}/ui/dlq")
    second = browser.current_window_handle

    browser.switch_to.window(first)
    browser.find_element(By.CSS_SELECTOR, f"{row} form.redrive button").click()
    level, text = flash(browser)
    assert (level, text) == (
        "ok",
        f"dead letter '{letter.id}' redriven: record sent again to {stack.settings.topic('commands')}",
    )

    browser.switch_to.window(second)
    browser.find_element(By.CSS_SELECTOR, f"{row} form.redrive button").click()
    level, text = flash(browser)
    assert level == "refused"
    assert text.startswith(f"dead letter '{letter.id}' was already redriven at ")
    assert text.endswith("; a second redrive is refused")
    shot(browser, "dlq")
    browser.close()
    browser.switch_to.window(first)

    # the redriven record is still not a Keel record: a new letter, which is discarded
    again = wait_until(
        lambda: next(iter(DeadLetters(stack.settings).letters(include_closed=False)), None),
        90,
        "the redriven record's own dead letter",
    )
    assert again.id != letter.id
    browser.get(f"{stack.url}/ui/dlq")
    row = f'#letters tr[data-letter-id="{again.id}"]'
    browser.find_element(By.CSS_SELECTOR, f"{row} form.discard input[name=reason]").send_keys(
        "not a Keel record"
    )
    browser.find_element(By.CSS_SELECTOR, f"{row} form.discard button").click()
    assert flash(browser) == (
        "ok",
        f"dead letter '{again.id}' discarded by alice (web UI): not a Keel record",
    )
    assert browser.find_elements(By.CSS_SELECTOR, row) == []  # only open letters listed


def test_an_operator_cancels_a_run_from_its_page(browser, alice, stack, runs):
    wf = "inv-ui-2026-0044"
    stack.client.start(
        "invoice_review", {"invoice_number": wf, "supplier": "ACME Tools", "amount": 80.0}, wf
    )
    wait_until(lambda: (stack.client.projection.get(wf) or {}).get("state") == "approval", 90, wf)
    browser.get(f"{stack.url}/ui/runs/{wf}")
    browser.find_element(By.ID, "cancel-reason").send_keys("sent twice")
    browser.find_element(By.CSS_SELECTOR, "#cancel-form button").click()
    until(browser, lambda b: b.switch_to.alert, "the confirmation").accept()
    level, text = flash(browser)
    assert level == "ok" and text.startswith(f"cancel sent to {wf} ("), text
    wait_until(lambda: stack.client.projection.status(wf) == "cancelled", 60, "the cancel")
    browser.refresh()
    assert browser.find_element(By.ID, "run-status").text == "cancelled"
    assert browser.find_elements(By.ID, "cancel-form") == []  # no action on an ended run
    last = browser.find_elements(By.CSS_SELECTOR, "#timeline > li")[-1]
    assert last.get_attribute("data-type") == "WorkflowCancelled"
    assert "sent twice (by alice, web UI)" in last.text


def test_health_shows_the_services_the_lag_and_the_workers_activity_types(
    browser, alice, stack, runs
):
    prefix = stack.settings.topic_prefix
    browser.get(f"{stack.url}/ui/health")

    def settled() -> bool:
        roles = [
            r.get_attribute("data-role")
            for r in browser.find_elements(By.CSS_SELECTOR, "#services tbody tr")
        ]
        lag = [
            [c.text for c in r.find_elements(By.TAG_NAME, "td")]
            for r in browser.find_elements(By.CSS_SELECTOR, "#lag tbody tr[data-topic]")
        ]
        expected = [
            [f"{prefix}.orchestrator", f"{prefix}.commands"],
            [f"{prefix}.projector", f"{prefix}.events"],
            [f"{prefix}.workers", f"{prefix}.activity-tasks"],
        ]
        # caught up: at most a transaction's commit marker per partition (4) is left
        return (
            sorted(roles) == ["orchestrator", "worker"]
            and [row[:2] for row in lag] == expected
            and all(0 <= int(row[2]) <= 4 for row in lag)
        )

    refreshed_until(browser, settled, "both services and no backlog")
    types = browser.find_element(By.ID, "activity-types").text
    assert types == "llm.classify_invoice"
    workers = browser.find_elements(By.CSS_SELECTOR, "#workers tbody tr")
    assert len(workers) == 1
    assert workers[0].find_elements(By.TAG_NAME, "td")[1].text == "running"
    shot(browser, "health")


def test_an_actor_without_the_roles_sees_no_task_and_may_not_act(browser, stack, runs):
    browser.delete_all_cookies()
    sign_in(browser, stack.url, BEARERS["bob"])
    assert (
        until(browser, lambda b: b.find_element(By.ID, "who"), "signed in").text == "bob (auditor)"
    )
    browser.get(f"{stack.url}/ui/tasks")
    assert browser.find_element(By.CSS_SELECTOR, "#tasks td.empty").text == "nothing to decide"
    browser.get(f"{stack.url}/ui/dlq?all=1")
    assert browser.find_elements(By.CSS_SELECTOR, "#letters form.redrive") == []
    csrf = browser.find_element(By.CSS_SELECTOR, 'input[name="csrf"]').get_attribute("value")
    cookie = browser.get_cookie("keel_ui_session")["value"]
    status, body = post(
        f"{stack.url}/ui/dlq/any-letter/redrive",
        f"csrf={csrf}".encode(),
        {
            "Cookie": f"keel_ui_session={cookie}",
            "Content-Type": "application/x-www-form-urlencoded",
        },
    )
    assert status == 403
    assert "actor &#39;bob&#39; lacks the role &#39;keel-operator&#39; that a redrive needs" in body
    browser.delete_all_cookies()


def test_a_migration_dry_run_shows_the_mapping_and_writes_nothing(browser, alice, stack, runs):
    wf = "inv-ui-2026-0045"
    stack.client.start(
        "invoice_review",
        {"invoice_number": wf, "supplier": "ACME Tools", "amount": 90.0},
        wf,
        version=1,
    )
    wait_until(lambda: (stack.client.projection.get(wf) or {}).get("state") == "approval", 90, wf)
    before = stack.client.show(wf).history
    browser.get(f"{stack.url}/ui/runs/{wf}")
    Select(browser.find_element(By.ID, "migrate-version")).select_by_visible_text("v2")
    browser.find_element(By.CSS_SELECTOR, "#migrate-form button").click()
    outcome = until(browser, lambda b: b.find_element(By.ID, "migration-outcome"), "the plan")
    assert outcome.get_attribute("data-outcome") == "would_migrate"
    assert outcome.text == (
        "would migrate: invoice_review v1 state 'approval' → v2 state 'approval'"
    )
    v2 = ui_app.app.get("invoice_review", 2)
    assert browser.find_element(By.ID, "migration-digest").text == v2.digest
    events = browser.find_elements(By.CSS_SELECTOR, "#migration-events li")
    written = [json.loads(e.text) for e in events]
    assert [e["type"] for e in written] == [
        "WorkflowMigrated",
        "StateEntered",
        "HumanTaskOpened",  # v2's task: the approver gets 1800 s
        "TimerScheduled",
    ]
    assert (written[0]["actor"], written[0]["migration"], written[0]["to_state"]) == (
        "alice",
        "v1->v2",
        "approval",
    )
    # v2 gives the approver 1800 s, not 3600: its task would have been opened differently
    replay = browser.find_element(By.ID, "migration-replay")
    assert replay.get_attribute("data-differs") == "yes"
    assert "HumanTaskOpened" in browser.find_element(By.CSS_SELECTOR, ".io").text
    shot(browser, "migration")
    after = stack.client.show(wf)
    assert after.version == 1 and after.history == before  # a dry run writes nothing

    browser.get(f"{stack.url}/ui/runs/{CANCELLED}/migration?to_version=2")
    outcome = until(browser, lambda b: b.find_element(By.ID, "migration-outcome"), "the refusal")
    assert outcome.get_attribute("data-outcome") == "refused"
    assert outcome.text == (
        f"would be refused: workflow '{CANCELLED}' is cancelled; migration to version 2 refused"
    )
