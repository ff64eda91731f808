"""Conditional writes in front of rclone's S3 server, for the persistent embedded broker.

Tansu's S3 storage keeps each partition's watermark (and its group offsets) with optimistic
concurrency: a fresh broker writes with `If-None-Match: *` ("create, unless it exists") and then
`If-Match: <etag>`, and on 412 it reads the stored value and retries. `rclone serve s3` ignores
both headers (checked with curl against rclone 1.75.2: every PUT answers 200), so a restarted
broker's first produce overwrote the stored watermark with its empty default and wrote new
batches over acknowledged ones. This proxy answers those two preconditions itself (HEAD the
object, compare, then forward the PUT under a per-object lock) and passes every other request
through untouched. One broker writes, so a lock per object in this process makes it atomic.
"""
from __future__ import annotations

import asyncio
import threading
from collections import defaultdict

from aiohttp import ClientError, ClientSession, web

_HOP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}
_PRECONDITION_FAILED = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>PreconditionFailed'
                        b'</Code><Message>At least one of the preconditions you specified did not '
                        b'hold</Message></Error>')


def _etag(value: str | None) -> str:
    return (value or "").removeprefix("W/").strip('"')


def precondition_holds(if_none_match: str | None, if_match: str | None, exists: bool,
                       current_etag: str | None) -> bool:
    """S3's rules for a conditional PUT, as object_store relies on them."""
    if if_none_match == "*" and exists:
        return False
    if if_match is not None and (not exists or _etag(if_match) != _etag(current_etag)):
        return False
    return True


class S3Guard:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self.session: ClientSession | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._handle(request)
        except (ConnectionError, ClientError) as err:  # rclone or Tansu went away mid-request
            return web.Response(status=503, text=f"s3guard: {type(err).__name__}: {err}")

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if self.session is None:
            self.session = ClientSession(auto_decompress=False)
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        if_none_match, if_match = request.headers.get("If-None-Match"), request.headers.get("If-Match")
        if request.method == "PUT" and (if_none_match or if_match):
            async with self.locks[request.path]:
                async with self.session.head(self.upstream + request.path) as head:
                    exists, etag = head.status == 200, head.headers.get("ETag")
                if not precondition_holds(if_none_match, if_match, exists, etag):
                    return web.Response(status=412, body=_PRECONDITION_FAILED,
                                        content_type="application/xml")
                headers.pop("If-None-Match", None)
                headers.pop("If-Match", None)
                return await self._forward(request, headers, body)
        return await self._forward(request, headers, body)

    async def _forward(self, request: web.Request, headers: dict, body: bytes) -> web.StreamResponse:
        async with self.session.request(request.method, self.upstream + request.path_qs,
                                        headers=headers, data=body or None,
                                        allow_redirects=False) as upstream:
            payload = await upstream.read()
            response = web.StreamResponse(status=upstream.status)
            for name, value in upstream.headers.items():
                if name.lower() not in _HOP:
                    response.headers.add(name, value)
            if request.method == "HEAD":
                length = upstream.headers.get("Content-Length")
                if length is not None:
                    response.headers["Content-Length"] = length
                await response.prepare(request)
                await response.write_eof()
                return response
            response.content_length = len(payload)
            await response.prepare(request)
            await response.write(payload)
            await response.write_eof()
            return response


def serve_in_thread(port: int, upstream: str) -> threading.Thread:
    """Run the guard on 127.0.0.1:port in a daemon thread of this process (it lives and dies
    with the process that runs the broker's supervisor)."""
    ready = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        guard = S3Guard(upstream)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", guard.handle)
        runner = web.AppRunner(app, access_log=None)
        try:
            loop.run_until_complete(runner.setup())
            loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        except BaseException as err:  # noqa: BLE001 - reported to the starting thread
            failure.append(err)
            ready.set()
            return
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, name=f"s3guard-{port}", daemon=True)
    thread.start()
    ready.wait(10)
    if failure:
        raise failure[0]
    return thread
