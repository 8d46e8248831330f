"""The operator web UI's pages under ``/ui`` (docs/ui.md): sign-in, runs, a run, the
human-task inbox, the dead letters and health.

Every page needs a session (connectors/ui/sessions.py): without one a page redirects to
the sign-in form and a POST is refused (403). Every POST carries the session's CSRF token
(else 403), and answers with a redirect to a page that shows the outcome once (a flash),
so a reload never repeats an action. Blocking reads and writes (Redis, Kafka) run in the
default executor. Run and dead-letter actions need the actor role ``keel-operator``;
decisions need one of the task's roles, as in the task API. A migration's dry run is a GET:
it writes nothing (``keel workflow migrate --dry-run``), so it needs the role, not a token.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from functools import partial, wraps
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import quote

import aiohttp_jinja2
import jinja2
from aiohttp import web

from connectors.human_task_api import TaskApi
from connectors.ui.health_view import health
from connectors.ui.run_listing import ATTRIBUTE_FIELDS, RunQuery, runs_page
from connectors.ui.sessions import COOKIE, PRE_COOKIE, FlashLevel, Session, SessionStore, same_token
from connectors.ui.task_desk import TaskDecisions
from connectors.ui.timeline import duration, timeline
from orchestrator.application.app import KeelApp
from orchestrator.client.client import KeelClient, parse_json
from orchestrator.client.migration_requests import MigrationPlan
from orchestrator.config.redaction import clip
from orchestrator.config.settings import Settings
from orchestrator.domain.model.errors import InvalidInputError, KeelError, NotFoundError, iso_utc
from orchestrator.domain.model.state import STATUSES, TERMINAL_STATUSES
from orchestrator.domain.model.vocabulary import Resolution
from orchestrator.records.clock import SYSTEM_CLOCK, Clock

__all__ = ["OPERATOR_ROLE", "OperatorUi", "mount"]

log = logging.getLogger("keel.connector.ui")

#: The actor role that may signal, cancel, redrive and discard from the UI.
OPERATOR_ROLE = "keel-operator"
ROOT = "/ui"
_HERE = Path(__file__).resolve().parent
#: Headers of every UI answer: no framing, scripts only from here, nothing cached.
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; form-action 'self'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

Page = Callable[["OperatorUi", web.Request, Session], Awaitable[web.StreamResponse]]


def page(fn: Page) -> Callable[[OperatorUi, web.Request], Awaitable[web.StreamResponse]]:
    """A page that needs a session: none → the sign-in form (GET) or 403 (POST); a POST
    whose CSRF token is not the session's → 403."""

    @wraps(fn)
    async def wrapped(self: OperatorUi, request: web.Request) -> web.StreamResponse:
        session = self.sessions.get(request.cookies.get(COOKIE))
        if session is None:
            if request.method != "GET":
                return self.refusal(request, 403, "sign in first: this action needs a session")
            raise web.HTTPSeeOther(f"{ROOT}/signin?next={quote(request.path_qs, safe='')}")
        if request.method == "POST":
            form = await request.post()
            if not same_token(_field(form, "csrf"), session.csrf):
                return self.refusal(
                    request, 403, "the form's CSRF token is missing or wrong; reload the page"
                )
        return await fn(self, request, session)

    return wrapped


def pretty_json(value: Any) -> str:
    """JSON for a ``<pre>``, as written (``tojson`` escapes ``<>&'`` as ``\\u00..`` for
    scripts; the page's autoescape makes this safe in HTML)."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def _field(form: Any, name: str) -> str:
    value = form.get(name)
    return value if isinstance(value, str) else ""


class OperatorUi:
    """The UI of one connector process, on its settings, application, task API and client."""

    def __init__(
        self,
        settings: Settings,
        app: KeelApp,
        tasks: TaskApi,
        client: KeelClient,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.settings = settings
        self.app = app
        self.tasks = tasks
        self.client = client
        #: Session expiry and the "so far" of a timeline or a task's SLA.
        self.clock = clock
        self.sessions = SessionStore(clock=clock)
        self.decisions = TaskDecisions(tasks)
        #: A migration's dry run of one run (workflow id, target version, actor).
        self.plan_migration: Callable[[str, int, str], MigrationPlan] = self._plan_migration

    def _plan_migration(self, workflow_id: str, to_version: int, actor: str) -> MigrationPlan:
        reason = f"dry run by {actor}, web UI"
        return self.client.migrations.plan([workflow_id], to_version, actor, reason)[0]

    def application(self) -> web.Application:
        ui = web.Application(middlewares=[_security_headers])
        env = aiohttp_jinja2.setup(
            ui,
            loader=jinja2.FileSystemLoader(_HERE / "templates"),
            autoescape=jinja2.select_autoescape(default=True),
        )
        env.filters["utc"] = lambda ms: iso_utc(int(ms)) if ms else ""
        env.filters["duration"] = duration
        env.filters["when"] = lambda t: iso_utc(int(t.timestamp() * 1000)) if t else ""
        env.filters["part"] = lambda text: quote(str(text), safe="")
        env.filters["pretty"] = pretty_json
        r = ui.router
        r.add_get("", self.home)
        r.add_get("/", self.home)
        r.add_get("/signin", self.signin_form)
        r.add_post("/signin", self.signin)
        r.add_post("/signout", self.signout)
        r.add_get("/runs", self.runs)
        r.add_get("/counts", self.counts)
        r.add_get("/runs/{wf:.+}/migration", self.migration)  # before the run's own page
        r.add_get("/runs/{wf:.+}", self.run)
        r.add_post("/runs/{wf:.+}/signal", self.signal)
        r.add_post("/runs/{wf:.+}/cancel", self.cancel)
        r.add_post("/runs/{wf:.+}/resolve", self.resolve)
        r.add_get("/tasks", self.inbox)
        r.add_get("/tasks/{task_id:.+}", self.task)
        r.add_post("/tasks/{task_id:.+}/decision", self.decide)
        r.add_get("/dlq", self.dlq)
        r.add_post("/dlq/{letter:.+}/redrive", self.redrive)
        r.add_post("/dlq/{letter:.+}/discard", self.discard)
        r.add_get("/health", self.health)
        r.add_static("/static", _HERE / "static", append_version=True)
        return ui

    # ------------------------------------------------------------------ helpers
    async def _run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, partial(fn, *args, **kwargs))

    def render(
        self,
        name: str,
        request: web.Request,
        session: Session | None,
        status: int = 200,
        **ctx: Any,
    ) -> web.Response:
        context = {
            "root": ROOT,
            "session": session,
            "actor": session.actor if session else None,
            "csrf": session.csrf if session else "",
            "flashes": session.take_flashes() if session else [],
            "operator": session is not None and OPERATOR_ROLE in session.actor.roles,
            **ctx,
        }
        return aiohttp_jinja2.render_template(name, request, context, status=status)

    def refusal(self, request: web.Request, status: int, reason: str) -> web.Response:
        """A refused request as a page of its own (the reason, and where to go on)."""
        # a path is the requester's to make long: quoted clipped (issue 44)
        log.info("ui %s %s: %d: %s", request.method, clip(request.path), status, clip(reason))
        session = self.sessions.get(request.cookies.get(COOKIE))
        return self.render("refused.html", request, session, status, reason=reason, code=status)

    def _back(self, session: Session, level: FlashLevel, text: str, to: str) -> NoReturn:
        """Show ``text`` once on page ``to``, where the answer redirects."""
        session.flash(level, text)
        raise web.HTTPSeeOther(to)

    async def _act(
        self,
        request: web.Request,
        session: Session,
        what: str,
        to: str,
        call: Callable[[], str],
        shown: Callable[[str], str],
    ) -> web.StreamResponse:
        """An operator's action (signal, cancel, resolve, redrive, discard): refused without the
        role; else ``call()`` (blocking), its outcome or the client's refusal shown on ``to``."""
        if OPERATOR_ROLE not in session.actor.roles:
            return self.refusal(
                request,
                403,
                f"actor '{session.actor.name}' lacks the role '{OPERATOR_ROLE}' that {what} needs",
            )
        try:
            result = await self._run(call)
        except KeelError as exc:
            self._back(session, FlashLevel.REFUSED, str(exc), to)
        log.info("ui: '%s' %s: %s", session.actor.name, what, result)
        self._back(session, FlashLevel.OK, shown(result), to)

    # ------------------------------------------------------------------ sign-in
    async def home(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPSeeOther(f"{ROOT}/runs")

    async def signin_form(
        self, request: web.Request, reason: str = "", status: int = 200
    ) -> web.Response:
        pre = secrets.token_urlsafe(24)
        answer = self.render(
            "signin.html", request, None, status, pre=pre, reason=reason, next=_next(request)
        )
        answer.set_cookie(PRE_COOKIE, pre, path=ROOT, httponly=True, samesite="Strict", max_age=900)
        return answer

    async def signin(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        if not same_token(_field(form, "pre"), request.cookies.get(PRE_COOKIE, "")):
            return await self.signin_form(request, "the sign-in form expired; sign in again", 403)
        actor = self.tasks.actors.authenticate(f"Bearer {_field(form, 'token').strip()}")
        if actor is None:
            log.info("ui sign-in refused: unknown token")
            return await self.signin_form(
                request, "unknown token: sign in with your actor's bearer token", 401
            )
        session_id, _ = self.sessions.create(actor)
        log.info("ui sign-in: actor '%s'", actor.name)
        answer = web.HTTPSeeOther(_next(request, _field(form, "next")))
        answer.set_cookie(
            COOKIE,
            session_id,
            path=ROOT,
            httponly=True,
            samesite="Strict",
            secure=request.secure,
            max_age=int(self.sessions.ttl_s),
        )
        answer.del_cookie(PRE_COOKIE, path=ROOT)
        raise answer

    @page
    async def signout(self, request: web.Request, session: Session) -> web.StreamResponse:
        self.sessions.end(request.cookies.get(COOKIE))
        answer = web.HTTPSeeOther(f"{ROOT}/signin")
        answer.del_cookie(COOKIE, path=ROOT)
        raise answer

    # ------------------------------------------------------------------ runs
    @page
    async def runs(self, request: web.Request, session: Session) -> web.StreamResponse:
        query = RunQuery.of(request.query, request.query.getall("attr", []))
        try:
            data = await self._run(runs_page, self.client, query)
        except KeelError as exc:
            return self.refusal(request, 400, str(exc))
        return self.render(
            "runs.html",
            request,
            session,
            data=data,
            statuses=STATUSES,
            workflows=sorted({name for name, _ in self.app.definitions}),
            attribute_fields=ATTRIBUTE_FIELDS,
        )

    @page
    async def counts(self, request: web.Request, session: Session) -> web.StreamResponse:
        return web.json_response(await self._run(self.client.counts_by_status))

    @page
    async def run(self, request: web.Request, session: Session) -> web.StreamResponse:
        wf = request.match_info["wf"]
        try:
            view = await self._run(self.client.show, wf)
        except NotFoundError as exc:
            return self.refusal(request, 404, str(exc))
        started = next((h for h in view.history if h["type"] == "WorkflowStarted"), None)
        try:
            signals = sorted(self.app.get(view.name, view.version).signal_names)
        except KeelError:  # a run of a version this connector's application lacks
            signals = []
        return self.render(
            "run.html",
            request,
            session,
            view=view,
            entries=timeline(view.history, view.llm, self.clock.now_ms()),
            input=started["data"].get("input") if started else None,
            running=view.status not in TERMINAL_STATUSES,
            attention=next(
                (
                    h["data"].get("activity_id", "")
                    for h in reversed(view.history)
                    if h["type"] == "WorkflowNeedsAttention"
                ),
                "",
            ),
            resolutions=tuple(Resolution),
            signals=signals,
            versions=sorted(
                v for (n, v) in self.app.definitions if n == view.name and v != view.version
            ),
        )

    @page
    async def migration(self, request: web.Request, session: Session) -> web.StreamResponse:
        """What migrating the run to ``?to_version=N`` would do: its mapping and the events
        it would write, or why it would be refused, and where version N would have decided
        the recorded history differently. Nothing is written."""
        wf = request.match_info["wf"]
        if OPERATOR_ROLE not in session.actor.roles:
            return self.refusal(
                request,
                403,
                f"actor '{session.actor.name}' lacks the role '{OPERATOR_ROLE}' "
                "that a migration's dry run needs",
            )
        raw = request.query.get("to_version", "")
        if not raw.isdigit() or int(raw) < 1:
            return self.refusal(
                request, 400, f"to_version must be a version >= 1, not {raw[:20]!r}"
            )
        try:
            planned = await self._run(self.plan_migration, wf, int(raw), session.actor.name)
        except KeelError as exc:
            return self.refusal(request, 404 if isinstance(exc, NotFoundError) else 400, str(exc))
        log.info("ui: '%s' dry-ran a migration of %s: %s", session.actor.name, wf, planned.outcome)
        return self.render("migration.html", request, session, plan=planned)

    @page
    async def signal(self, request: web.Request, session: Session) -> web.StreamResponse:
        wf = request.match_info["wf"]
        form = await request.post()
        name, payload = _field(form, "name").strip(), _field(form, "payload") or "{}"
        return await self._act(
            request,
            session,
            "a signal",
            f"{ROOT}/runs/{quote(wf, safe='')}",
            partial(self.client.signal, wf, name, payload.encode()),
            lambda mid: f"signal '{name}' sent to {wf} ({mid})",
        )

    @page
    async def cancel(self, request: web.Request, session: Session) -> web.StreamResponse:
        wf = request.match_info["wf"]
        form = await request.post()
        reason = " ".join(_field(form, "reason").split())[:500] or "cancelled by operator"
        return await self._act(
            request,
            session,
            "a cancel",
            f"{ROOT}/runs/{quote(wf, safe='')}",
            partial(self.client.cancel, wf, f"{reason} (by {session.actor.name}, web UI)"),
            lambda mid: f"cancel sent to {wf} ({mid})",
        )

    @page
    async def resolve(self, request: web.Request, session: Session) -> web.StreamResponse:
        """Settle an activity whose outcome stayed unknown (``keel workflow resolve``): found
        (with its result as JSON), not found (retry the same attempt) or failed."""
        wf = request.match_info["wf"]
        form = await request.post()
        activity_id, resolution = _field(form, "activity_id").strip(), _field(form, "resolution")
        reason = " ".join(_field(form, "reason").split())[:500] or "resolved by operator"
        reason = f"{reason} (by {session.actor.name}, web UI)"
        result_text = _field(form, "result") or "null"

        def send() -> str:
            if resolution not in tuple(Resolution):
                raise InvalidInputError(
                    f"resolution must be one of {', '.join(Resolution)}, not {resolution[:40]!r}"
                )
            found = resolution == Resolution.FOUND
            result = parse_json(result_text, "the result") if found else None
            return self.client.resolve(wf, activity_id, resolution, result, reason)

        return await self._act(
            request,
            session,
            "a resolution",
            f"{ROOT}/runs/{quote(wf, safe='')}",
            send,
            lambda mid: f"resolution '{resolution}' of {activity_id} sent to {wf} ({mid})",
        )

    # ------------------------------------------------------------------ human tasks
    @page
    async def inbox(self, request: web.Request, session: Session) -> web.StreamResponse:
        tasks = await self._run(self.decisions.inbox, session.actor)
        return self.render("tasks.html", request, session, tasks=tasks, now=self.clock.now_ms())

    @page
    async def task(self, request: web.Request, session: Session) -> web.StreamResponse:
        found = await self._run(self.decisions.task, request.match_info["task_id"])
        if found is None:
            return self.refusal(request, 404, "no human task has this id")
        may = self.decisions.may_decide(found, session.actor)
        now = self.clock.now_ms()
        entries = timeline(found["history"], {}, now)
        return self.render(
            "task.html", request, session, task=found, may=may, now=now, entries=entries
        )

    @page
    async def decide(self, request: web.Request, session: Session) -> web.StreamResponse:
        task_id = request.match_info["task_id"]
        form = await request.post()
        to = f"{ROOT}/tasks/{quote(task_id, safe='')}"
        level, text = await self._run(
            self.decisions.decide,
            task_id,
            session.actor,
            _field(form, "decision"),
            _field(form, "operation_digest"),
            _field(form, "reason"),
        )
        return self._back(session, level, text, to)

    # ------------------------------------------------------------------ dead letters
    @page
    async def dlq(self, request: web.Request, session: Session) -> web.StreamResponse:
        every = request.query.get("all") == "1"
        letters = await self._run(
            self.client.dead_letters.letters, include_closed=every, newest_first=True
        )
        return self.render("dlq.html", request, session, letters=letters, every=every)

    @page
    async def redrive(self, request: web.Request, session: Session) -> web.StreamResponse:
        letter = request.match_info["letter"]
        return await self._act(
            request,
            session,
            "a redrive",
            f"{ROOT}/dlq",
            partial(self.client.dead_letters.redrive, letter),
            lambda done: f"dead letter '{letter}' redriven: {done}",
        )

    @page
    async def discard(self, request: web.Request, session: Session) -> web.StreamResponse:
        letter = request.match_info["letter"]
        form = await request.post()
        by = f"{session.actor.name} (web UI)"
        return await self._act(
            request,
            session,
            "a discard",
            f"{ROOT}/dlq",
            partial(self.client.dead_letters.discard, letter, _field(form, "reason"), by),
            lambda done: done,
        )

    # ------------------------------------------------------------------ health
    @page
    async def health(self, request: web.Request, session: Session) -> web.StreamResponse:
        found = await self._run(health, self.settings, self.app)
        return self.render("health.html", request, session, health=found)


def _next(request: web.Request, value: str | None = None) -> str:
    """Where a sign-in goes on to: a page of the UI only (never another site)."""
    target = value if value is not None else request.query.get("next", "")
    if target.startswith(f"{ROOT}/") and not target.startswith("//") and "\\" not in target:
        return target
    return f"{ROOT}/runs"


@web.middleware
async def _security_headers(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        answer = await handler(request)
    except web.HTTPException as exc:
        exc.headers.update(_HEADERS)
        raise
    answer.headers.update(_HEADERS)
    return answer


def mount(
    web_app: web.Application,
    settings: Settings,
    app: KeelApp,
    tasks: TaskApi,
    client: KeelClient,
    clock: Clock = SYSTEM_CLOCK,
) -> OperatorUi:
    """Serve the UI under ``/ui`` of the connector's application."""
    ui = OperatorUi(settings, app, tasks, client, clock)
    web_app.add_subapp(ROOT, ui.application())
    return ui
