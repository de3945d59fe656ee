"""The relay under every proxied connection: bytes copied both ways between two sockets, each end-of-file passed on
as a half-close, until both have finished, the tunnel idles or the proxy closes."""

from __future__ import annotations

import selectors
import socket
import time

RELAY_CHUNK = 64 * 1024  # bytes per recv, and the most held per direction, so a slow reader slows its writer


def relay(a: socket.socket, b: socket.socket, idle: float, wake_fd: int, to_b: bytes = b"",
          end_with_b: bool = False) -> None:
    """Copy bytes both ways until both sides have finished (each end-of-file passed on as a half-close), `idle`
    seconds pass with no byte either way, either side fails, or `wake_fd` becomes readable (the proxy closes).
    `end_with_b`: stop as soon as b has finished and its bytes are delivered (a plain-HTTP response)."""
    a.setblocking(False)
    b.setblocking(False)
    peer = {a: b, b: a}
    out = {a: bytearray(), b: bytearray(to_b)}  # bytes waiting to be written TO that socket
    eof = {a: False, b: False}
    shut = {a: False, b: False}
    interest = {a: 0, b: 0}
    selector = selectors.DefaultSelector()
    selector.register(wake_fd, selectors.EVENT_READ, None)
    last = time.monotonic()
    try:
        while True:
            for s in (a, b):
                if eof[peer[s]] and not out[s] and not shut[s]:
                    try:
                        s.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    shut[s] = True
            if eof[a] and eof[b] and not out[a] and not out[b]:
                return
            if end_with_b and eof[b] and not out[a]:
                return
            for s in (a, b):
                events = (selectors.EVENT_READ if not eof[s] and len(out[peer[s]]) < RELAY_CHUNK else 0) | (
                    selectors.EVENT_WRITE if out[s] else 0)
                if events != interest[s]:
                    if not interest[s]:
                        selector.register(s, events)
                    elif not events:
                        selector.unregister(s)
                    else:
                        selector.modify(s, events)
                    interest[s] = events
            remaining = last + idle - time.monotonic()
            if remaining <= 0:
                return
            for key, mask in selector.select(remaining):
                if key.data is None and key.fileobj == wake_fd:
                    return
                s = key.fileobj
                if mask & selectors.EVENT_READ:
                    try:
                        data = s.recv(RELAY_CHUNK)
                    except (BlockingIOError, InterruptedError):
                        data = None
                    if data is not None:
                        if data:
                            out[peer[s]] += data
                            last = time.monotonic()
                        else:
                            eof[s] = True
                if mask & selectors.EVENT_WRITE and out[s]:
                    try:
                        sent = s.send(out[s])
                    except (BlockingIOError, InterruptedError):
                        sent = 0
                    del out[s][:sent]
                    last = time.monotonic()
    except OSError:  # a reset or a broken pipe on either side ends the relay; the caller closes both
        return
    finally:
        selector.close()
