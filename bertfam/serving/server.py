"""The HTTP server around the app: uvicorn, with the connection limits uvicorn lacks.

uvicorn times out idle keep-alive connections, but not a client that sends its request headers one byte at
a time, and its `limit_concurrency` only answers 503 once a request's headers are complete, so slow
clients still hold a file descriptor each until the process runs out. Here (`guarded_protocol`):

- at most `max_connections` open connections: one more is closed at once (a bare 503), before it is read;
- a request's headers must arrive within `header_timeout_s` of the connection (or of the previous answer,
  after the keep-alive wait), else the connection is closed;
- refused and timed-out connections are logged at most once per `LOG_EVERY_S` seconds, with a count, so a
  flood cannot fill the disk with log lines.

The body has its own deadline (`--body-timeout`, the app's BodyLimit middleware, 408). `serve` runs the
server so that SIGTERM and SIGINT end it gracefully (requests in flight are answered) and return to the
caller, whose shutdown then runs; uvicorn itself re-raises the signal afterwards (exit status 143).
"""
from __future__ import annotations

import logging
import time

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("bertfam")
LOG_EVERY_S = 10.0
MAX_HEADER_BYTES = 16 * 1024  # request line + headers; larger -> 400 (h11's own default, stated here)
_REFUSED_503 = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


class _RateLimitedLog:
    """One log line per `every` seconds per kind of event, saying how many happened since the last one."""

    def __init__(self, every: float = LOG_EVERY_S):
        self.every, self.last, self.counts = every, {}, {}

    def __call__(self, kind: str, message: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        now = time.monotonic()
        if now - self.last.get(kind, -1e9) >= self.every:
            log.warning("serve: %s (%d in the last %g s at most)", message, self.counts[kind], self.every)
            self.last[kind], self.counts[kind] = now, 0


def guarded_protocol(max_connections: int, header_timeout_s: float) -> type:
    """uvicorn's h11 protocol with a connection cap and a header deadline (see the module docstring)."""
    note = _RateLimitedLog()

    class GuardedH11Protocol(H11Protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._header_timer = None
            if len(self.connections) > max_connections:
                note("refused", f"connection refused: {max_connections} open (--max-connections)")
                transport.write(_REFUSED_503)
                transport.close()
                return
            self._expect_headers(header_timeout_s)

        def _expect_headers(self, within: float) -> None:
            """Close the connection unless a new request's headers are complete within `within` s."""
            self._cancel_header_timer()
            waiting_for = self.cycle  # a new request replaces it once its headers are parsed
            self._header_timer = self.loop.call_later(within, self._headers_late, waiting_for)

        def _headers_late(self, waiting_for) -> None:
            self._header_timer = None
            if self.cycle is waiting_for and not self.transport.is_closing():
                note("slow", f"connection closed: request headers not received within {header_timeout_s:g} s "
                             "(--header-timeout)")
                self.transport.close()

        def _cancel_header_timer(self) -> None:
            if getattr(self, "_header_timer", None) is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def handle_events(self) -> None:
            before = self.cycle
            super().handle_events()
            if self.cycle is not before:  # the headers of a request arrived
                self._cancel_header_timer()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():  # kept alive: the next request gets the same deadline
                self._expect_headers(self.timeout_keep_alive + header_timeout_s)

        def connection_lost(self, exc) -> None:
            self._cancel_header_timer()
            super().connection_lost(exc)

    return GuardedH11Protocol


class _Server(uvicorn.Server):
    def handle_exit(self, sig, frame) -> None:
        super().handle_exit(sig, frame)
        # uvicorn re-raises a caught signal once it has shut down, so SIGTERM would kill the process (143)
        # before the caller's shutdown runs; the graceful shutdown is the whole answer to it here
        self._captured_signals.clear()


def server_config(app, host: str, port: int, log_level: str = "warning") -> uvicorn.Config:
    """uvicorn's Config for `app` (made by create_app) with the limits of its service."""
    lim = app.state.service.limits
    return uvicorn.Config(app, host=host, port=port, log_level=log_level,
                          http=guarded_protocol(lim.max_connections, lim.header_timeout_s),
                          timeout_keep_alive=lim.keep_alive_s, h11_max_incomplete_event_size=MAX_HEADER_BYTES,
                          # answered in flight: at most one request timeout, then whatever is left is cut
                          timeout_graceful_shutdown=int(lim.timeout_s + lim.body_timeout_s) + 1)


def make_server(app, host: str, port: int, log_level: str = "warning") -> uvicorn.Server:
    return _Server(server_config(app, host, port, log_level))
