"""The dashboard service: follows the event stream into a `DashboardState` and serves it as HTML,
with server-sent events pushing each page's live part to the browser (no reload, no build step).

It reads six topics (five from the beginning) with no consumer group, so every replica (and every
restart) rebuilds the same picture and nothing is committed: jobs.status (the orchestrator's job
records, the agents' progress and checkpoints), jobs.planned (MARP's options), jobs.placed (the
scheduler's decision record), cluster.events (free GPUs and node state), jobs.logs (each job's
log tail) and, from their end,
nodes.heartbeats (GPU memory in use; the past of a heartbeat is worth nothing).
"""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

import jinja2
from aiohttp import web
from aiokafka import AIOKafkaConsumer, TopicPartition

from frenzy import events, topics
from frenzy.bus import ensure_topics
from frenzy.config import DashboardSettings, bootstrap
from frenzy.security.kafka import kafka_client_options
from frenzy.logs import get_logger
from frenzy.runtime import run_service, run_until_stopped
from frenzy_dashboard import view
from frenzy_dashboard.auth import SESSION_COOKIE, Gate, load_authenticator
from frenzy_dashboard.view import DashboardState, Principal

HERE = Path(__file__).parent
# frenzy.jobs.logs from the beginning too, so a restarted dashboard shows finished jobs' tails; it
# keeps only the last lines per job, but reads the topic's whole retained volume at start.
FROM_BEGINNING = (topics.JOBS_STATUS, topics.JOBS_PLANNED, topics.JOBS_PLACED, topics.CLUSTER_EVENTS,
                  topics.JOBS_LOGS)
FROM_END = (topics.NODES_HEARTBEATS,)
PUBLIC_PREFIXES = ("/login", "/healthz", "/static/")
COALESCE_S = 0.2  # a burst of events becomes one update
SSE_KEEPALIVE_S = 15.0
SHUTDOWN_S = 2.0
PRINCIPAL = web.RequestKey("principal", Principal)

log = get_logger("dashboard")

# page name -> its template; the live part is the same name with a leading underscore
PAGES = {"cluster": "cluster.html", "jobs": "jobs.html", "job": "job.html", "memory": "memory.html"}


class Dashboard:
    def __init__(self, settings: DashboardSettings, gate: Gate) -> None:
        self.settings = settings
        self.gate = gate
        self.state = DashboardState()
        self.prefix = topics.namespace_prefix(settings.namespace)
        self.following = False
        self.versions: dict[str, int] = {}  # view name ("cluster", "job/<id>", ...) -> changes
        self._wake = asyncio.Event()
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
            trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)

    # ---- the event stream ------------------------------------------------------------------

    async def follow(self) -> None:
        """Fold every record of the followed topics into the state, until cancelled."""
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap(self.settings), group_id=None, enable_auto_commit=False,
            fetch_max_wait_ms=self.settings.dashboard_fetch_max_wait_ms, client_id="frenzy-dashboard",
            **kafka_client_options(self.settings))  # TLS/SASL on a locked-down broker
        await consumer.start()
        try:
            start = [TopicPartition(self.prefix + t.name, p) for t in FROM_BEGINNING for p in range(t.partitions)]
            end = [TopicPartition(self.prefix + t.name, p) for t in FROM_END for p in range(t.partitions)]
            consumer.assign(start + end)
            await consumer.seek_to_beginning(*start)
            await consumer.seek_to_end(*end)
            self.following = True
            log.info("following the event stream", namespace=self.settings.namespace)
            while True:
                batch = await consumer.getmany(timeout_ms=500, max_records=2000)
                changed: set[str] = set()
                for records in batch.values():
                    for record in records:
                        changed |= self._apply(record)
                for name in changed:
                    self.versions[name] = self.versions.get(name, 0) + 1
                if changed:
                    self._wake.set()
                    self._wake = asyncio.Event()
        finally:
            self.following = False
            await consumer.stop()

    def _apply(self, record) -> set[str]:
        try:
            env = events.decode(record.value, record.headers,
                                record_id=f"{record.topic}/{record.partition}/{record.offset}")
        except events.MalformedEvent:
            return set()  # the consumers that own the topic dead-letter it; we only watch
        try:
            return self.state.apply(env)
        except Exception:  # a view bug must not stop the dashboard
            log.exception("event not shown", event_type=env.type, event_id=env.event_id)
            return set()

    @staticmethod
    def watched(page: str, job_id: str) -> tuple[str, ...]:
        """The views (names `DashboardState.apply` reports) a page's live part shows."""
        return {"cluster": ("cluster", "jobs"), "jobs": ("jobs",), "job": (f"job/{job_id}",),
                "memory": ("memory",)}[page]

    def versions_of(self, names: tuple[str, ...]) -> tuple[int, ...]:
        return tuple(self.versions.get(name, 0) for name in names)

    async def changed(self, timeout_s: float) -> None:
        try:
            await asyncio.wait_for(asyncio.shield(self._wake.wait()), timeout_s)
        except asyncio.TimeoutError:
            pass

    # ---- rendering -------------------------------------------------------------------------

    def context(self, page: str, who: Principal, job_id: str = "") -> dict[str, Any] | None:
        """What a page's live part shows, and the data of its charts; None: no such job."""
        now_s = time.time()
        if page == "cluster":
            return {"cluster": view.cluster_view(self.state, who),
                    "jobs": view.jobs_view(self.state, who, now_s),
                    "charts": {"utilisation": view.utilisation_series(self.state)}}
        if page == "jobs":
            return {"jobs": view.jobs_view(self.state, who, now_s), "charts": {}}
        if page == "job":
            job = view.job_view(self.state, job_id, who, now_s)
            if job is None:
                return None
            return {"job": job, "charts": {"curve": view.curve_series(self.state, job_id)}}
        if page == "memory":
            memory = view.memory_view(self.state, who)
            return {"memory": memory, "charts": {"scatter": {"data": memory["points"]}}}
        raise KeyError(page)

    def render_live(self, page: str, ctx: dict[str, Any]) -> str:
        return self.templates.get_template(f"_{PAGES[page]}").render(**ctx)

    def render_page(self, page: str, who: Principal, job_id: str = "") -> str | None:
        ctx = self.context(page, who, job_id)
        if ctx is None:
            return None
        return self.templates.get_template(PAGES[page]).render(
            page=page, who=who, job_id=job_id, live=self.render_live(page, ctx),
            charts_json=script_json(ctx["charts"]), **ctx)


DASHBOARD = web.AppKey("dashboard", Dashboard)


def script_json(data: Any) -> str:
    """JSON to inline in a <script> element: "<" escaped, so no value (a GPU type or a job name
    from the event stream) can close the element and start markup of its own."""
    return json.dumps(data).replace("<", "\\u003c")


# ---- HTTP ----------------------------------------------------------------------------------

def build_app(dashboard: Dashboard) -> web.Application:
    @web.middleware
    async def require_login(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]):
        if request.path.startswith(PUBLIC_PREFIXES):
            return await handler(request)
        who = dashboard.gate.principal(request.cookies.get(SESSION_COOKIE, ""))
        if who is None:
            if request.path.startswith("/events/"):
                raise web.HTTPUnauthorized(text="log in first")
            raise web.HTTPFound("/login")
        request[PRINCIPAL] = who
        return await handler(request)

    def html(text: str, status: int = 200) -> web.Response:
        return web.Response(text=text, status=status, content_type="text/html",
                            headers={"Cache-Control": "no-store"})

    async def login(request: web.Request) -> web.Response:
        if request.method == "POST":
            token = str((await request.post()).get("token", ""))
        else:
            token = request.query.get("token", "")
        if not token:
            return html(dashboard.templates.get_template("login.html").render(error=""))
        session_id = dashboard.gate.login(token)
        if session_id is None:
            return html(dashboard.templates.get_template("login.html").render(
                error="That token is not valid (a login link works once)."), status=401)
        response = web.HTTPFound("/")
        response.set_cookie(SESSION_COOKIE, session_id, httponly=True, samesite="Strict", path="/")
        raise response

    async def logout(request: web.Request) -> web.Response:
        dashboard.gate.logout(request.cookies.get(SESSION_COOKIE, ""))
        response = web.HTTPFound("/login")
        response.del_cookie(SESSION_COOKIE, path="/")
        raise response

    def page_handler(page: str):
        async def handle(request: web.Request) -> web.Response:
            job_id = request.match_info.get("job_id", "")
            text = dashboard.render_page(page, request[PRINCIPAL], job_id)
            if text is None:
                raise web.HTTPNotFound(text=f"no job {job_id!r} that you may see")
            return html(text)
        return handle

    async def live_events(request: web.Request) -> web.StreamResponse:
        """Server-sent events: the page's live part, re-sent whenever it changes."""
        page = request.match_info["page"]
        if page not in PAGES:
            raise web.HTTPNotFound()
        who, job_id = request[PRINCIPAL], request.query.get("job", "")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-store", "X-Accel-Buffering": "no"})
        await response.prepare(request)
        watched, refresh_s = dashboard.watched(page, job_id), dashboard.settings.dashboard_refresh_s
        last, seen, rendered_s, written_s = "", None, 0.0, time.monotonic()
        # aiohttp does not cancel a handler when its client goes away: watch the connection.
        while request.transport is not None and not request.transport.is_closing():
            # Render when a view this page shows changed, and every refresh_s anyway (waiting
            # times tick); send only what differs from the last update.
            now_s, versions = time.monotonic(), dashboard.versions_of(watched)
            if versions != seen or now_s - rendered_s >= refresh_s:
                seen, rendered_s = versions, now_s
                ctx = dashboard.context(page, who, job_id)  # None: the job is not (yet) known
                payload = last if ctx is None else json.dumps(
                    {"html": dashboard.render_live(page, ctx), "charts": ctx["charts"]})
                if payload != last:
                    await response.write(f"event: update\ndata: {payload}\n\n".encode())
                    last, written_s = payload, now_s
            if now_s - written_s >= SSE_KEEPALIVE_S:
                await response.write(b": keep-alive\n\n")  # also notices a closed browser
                written_s = now_s
            await dashboard.changed(refresh_s)
            await asyncio.sleep(COALESCE_S)
        return response

    async def health(request: web.Request) -> web.Response:
        if not dashboard.following:
            return web.Response(status=503, text="not following the event stream yet")
        return web.Response(text="ok")

    app = web.Application(middlewares=[require_login])
    app[DASHBOARD] = dashboard
    app.router.add_get("/login", login)
    app.router.add_post("/login", login)
    app.router.add_get("/logout", logout)
    app.router.add_get("/healthz", health)
    app.router.add_get("/", page_handler("cluster"))
    app.router.add_get("/jobs", page_handler("jobs"))
    app.router.add_get("/jobs/{job_id}", page_handler("job"))
    app.router.add_get("/memory", page_handler("memory"))
    app.router.add_get("/events/{page}", live_events)
    app.router.add_static("/static/", HERE / "static")
    return app


def make_gate(settings: DashboardSettings) -> Gate:
    gate = Gate(load_authenticator(settings.dashboard_authenticator, settings.dashboard_tokens_file,
                                   settings.security_dir),
                session_ttl_s=settings.dashboard_session_ttl_s)
    if settings.dashboard_login_ticket:
        gate.add_ticket(settings.dashboard_login_ticket, Principal("admin", "admin"))
    return gate


async def serve(stop: asyncio.Event, settings: DashboardSettings | None = None) -> None:
    settings = settings or DashboardSettings()
    dashboard = Dashboard(settings, make_gate(settings))
    # The topics may not exist yet when the dashboard starts first; assigning needs them.
    await ensure_topics(bootstrap(settings), prefix=dashboard.prefix,
                        replication_factor=settings.replication_factor)
    # Open event streams end within a refresh period of their browser leaving; at shutdown,
    # aiohttp waits this long for them (its default of 60 s would outlast a SIGTERM's grace).
    runner = web.AppRunner(build_app(dashboard), access_log=None, shutdown_timeout=SHUTDOWN_S)
    await runner.setup()
    await web.TCPSite(runner, settings.dashboard_host, settings.dashboard_port).start()
    log.info("dashboard listening", host=settings.dashboard_host, port=settings.dashboard_port)
    try:
        await run_until_stopped(stop, asyncio.create_task(dashboard.follow()))
    finally:
        await runner.cleanup()


def main() -> None:
    run_service(serve)
