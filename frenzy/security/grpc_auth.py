"""The gRPC edge's gate: bearer-token authentication, per-tenant rate limits, request size.

Every method of every service passes through `AuthInterceptor`, so a method added later is
covered without remembering to. Handlers ask `caller()` who is calling: the identity the
interceptor verified, kept in a context variable for the call (one check per call, and no
window in which a token revoked meanwhile would read differently).

Order of checks: token (UNAUTHENTICATED), then rate (RESOURCE_EXHAUSTED), then the request's
size (INVALID_ARGUMENT naming `request`). The size check runs on the parsed request; the
transport's own limit (`max_receive_message_length`, a few times larger) drops anything
bigger before it is parsed at all.
"""
from __future__ import annotations

import time
from contextvars import ContextVar

import grpc

from frenzy.security.limits import MAX_REQUEST_BYTES
from frenzy.security.ratelimit import RateLimiter
from frenzy.security.store import DEFAULT_TENANT, Identity, SecurityStore

TRANSPORT_MAX_BYTES = 8 * MAX_REQUEST_BYTES
HEALTH_METHOD_PREFIX = "/grpc.health.v1.Health/"  # the standard health service (frenzy.grpc_ops)
NOT_AUTHENTICATED = "not authenticated: missing or invalid token (set FRENZY_TOKEN or run " \
                    "`frenzy token create`)"
# With no security directory (a developer running one service by hand), every caller is an
# admin of the default tenant. `frenzy up` and compose always run with one.
ANONYMOUS_ADMIN = Identity(DEFAULT_TENANT, "admin", "")
_CALLER: ContextVar[Identity | None] = ContextVar("frenzy_caller", default=None)


def bearer_token(metadata) -> str:
    for key, value in metadata or ():
        if key == "authorization":
            text = value.decode(errors="replace") if isinstance(value, bytes) else value
            scheme, _, token = text.partition(" ")
            return token.strip() if scheme.lower() == "bearer" else ""
    return ""


class Authenticator:
    """Maps a call's metadata to an identity; None means not authenticated."""

    def __init__(self, store: SecurityStore | None) -> None:
        self.store = store

    def identify(self, metadata) -> Identity | None:
        if self.store is None:
            return ANONYMOUS_ADMIN
        return self.store.authenticate(bearer_token(metadata))


def caller() -> Identity:
    """Who is calling, as the interceptor verified it."""
    who = _CALLER.get()
    if who is None:
        raise RuntimeError("no verified caller: the handler runs without AuthInterceptor")
    return who


class AuthInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, auth: Authenticator, limiter: RateLimiter | None = None) -> None:
        self.auth = auth
        self.limiter = limiter or RateLimiter()

    async def _admit(self, request, context, metadata) -> Identity:
        who = self.auth.identify(metadata)
        if who is None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, NOT_AUTHENTICATED)
        if self.auth.store is not None:
            policy = self.auth.store.tenant(who.tenant)
            if not self.limiter.allow(who.tenant, policy.requests_per_s, policy.burst, time.monotonic()):
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                    f"rate limit: tenant {who.tenant!r} is over "
                                    f"{policy.requests_per_s:g} requests/s; retry later")
        if request is not None:
            await _check_size(request, context)
        return who

    async def intercept_service(self, continuation, details):
        handler = await continuation(details)
        if handler is None or details.method.startswith(HEALTH_METHOD_PREFIX):
            return handler  # probes carry no token; health says nothing about any job
        metadata = details.invocation_metadata
        admit = self._admit
        if handler.unary_unary is not None:
            inner = handler.unary_unary

            async def unary_unary(request, context):
                token = _CALLER.set(await admit(request, context, metadata))
                try:
                    return await inner(request, context)
                finally:
                    _CALLER.reset(token)

            return grpc.unary_unary_rpc_method_handler(
                unary_unary, request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)
        if handler.unary_stream is not None:
            inner_stream = handler.unary_stream

            async def unary_stream(request, context):
                _CALLER.set(await admit(request, context, metadata))  # this call's own task
                async for item in inner_stream(request, context):
                    yield item

            return grpc.unary_stream_rpc_method_handler(
                unary_stream, request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)
        if handler.stream_stream is not None:  # server reflection (frenzy.grpc_ops)
            inner_bidi = handler.stream_stream

            async def stream_stream(requests, context):
                _CALLER.set(await admit(None, context, metadata))

                async def bounded():
                    async for request in requests:
                        await _check_size(request, context)
                        yield request

                async for item in inner_bidi(bounded(), context):
                    yield item

            return grpc.stream_stream_rpc_method_handler(
                stream_stream, request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)
        return None  # client streaming: none exist; refusing beats serving it unchecked


async def _check_size(request, context) -> None:
    size = request.ByteSize()
    if size > MAX_REQUEST_BYTES:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                            f"request: {size} bytes exceeds the limit of {MAX_REQUEST_BYTES}")
