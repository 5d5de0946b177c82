"""A minimal NATS publisher for the benchmarks (flow-only.sh): JetStream publishes with headers,
pipelined, each with a reply inbox so its PubAck comes back; nothing else of the protocol.

Python has no NATS client in Debian and the benchmark must not pull one from PyPI; the text
protocol needs ~100 lines for this one job. Used from one thread per connection; not a
general client (no reconnect, no subscriptions beyond the PubAck inbox).
"""
import json
import os
import select
import socket
import time


class PublishError(RuntimeError):
    pass


class Publisher:
    """One NATS connection publishing to JetStream subjects and counting PubAcks."""

    def __init__(self, url, timeout=10.0):
        host, port = url.replace("nats://", "").rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.timeout = timeout
        info = self._line()
        if not info.startswith(b"INFO "):
            raise PublishError(f"not a NATS server: {info[:80]!r}")
        self.inbox = f"_INBOX.bench{os.getpid()}x{id(self)}"
        self.sock.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true,'
                          b'"protocol":1,"name":"weir-bench-publisher"}\r\n'
                          + f"SUB {self.inbox}.* 1\r\nPING\r\n".encode())
        while self._line() != b"PONG":
            pass
        self.acked = 0
        self.failed = 0
        self.errors = []

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    # ---- reading --------------------------------------------------------------------
    def _fill(self, block):
        if not block:
            r, _, _ = select.select([self.sock], [], [], 0)
            if not r:
                return False
        else:
            r, _, _ = select.select([self.sock], [], [], self.timeout)
            if not r:
                raise PublishError("no answer from nats-server within the timeout")
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise PublishError("nats-server closed the connection")
        self.buf += chunk
        return True

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill(True)
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _drain(self, block):
        """Parses what arrived (reads more when `block`); counts PubAcks."""
        if block or not self.buf:
            self._fill(block)
        while True:
            end = self.buf.find(b"\r\n")
            if end < 0:
                return
            line = self.buf[:end]
            if line.startswith(b"MSG "):
                size = int(line.rsplit(b" ", 1)[1])
                if len(self.buf) < end + 2 + size + 2:
                    self._fill(True)
                    continue
                payload = self.buf[end + 2:end + 2 + size]
                self.buf = self.buf[end + 2 + size + 2:]
                if b'"error"' in payload or not payload:
                    self.failed += 1
                    if len(self.errors) < 5:
                        self.errors.append(payload.decode(errors="replace"))
                else:
                    self.acked += 1
            elif line.startswith(b"HMSG "):
                # A status-only answer (503 no responders): the stream does not exist.
                parts = line.split()
                size = int(parts[-1])
                if len(self.buf) < end + 2 + size + 2:
                    self._fill(True)
                    continue
                payload = self.buf[end + 2:end + 2 + size]
                self.buf = self.buf[end + 2 + size + 2:]
                self.failed += 1
                if len(self.errors) < 5:
                    self.errors.append(payload.decode(errors="replace").strip())
            else:
                self.buf = self.buf[end + 2:]
                if line == b"PING":
                    self.sock.sendall(b"PONG\r\n")
                elif line.startswith(b"-ERR"):
                    raise PublishError(line.decode(errors="replace"))

    # ---- publishing -----------------------------------------------------------------
    def frame(self, subject, body, headers, n):
        hdr = "NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
        hb = hdr.encode()
        return (f"HPUB {subject} {self.inbox}.{n} {len(hb)} {len(hb) + len(body)}\r\n".encode() + hb + body
                + b"\r\n")

    def publish_all(self, frames, window=2000, chunk=200, stop=None):
        """Sends pre-built frames with at most `window` unacknowledged; returns when every
        PubAck (or error) is in, or when stop() turns true (then the rest is not sent)."""
        sent = 0
        total = len(frames)
        base = self.acked + self.failed  # answers to earlier calls

        def answered():
            return self.acked + self.failed - base

        while answered() < sent or sent < total:
            if stop is not None and stop() and sent < total:
                total = sent
                continue
            room = window - (sent - answered())
            if sent < total and room > 0:
                k = min(room, chunk, total - sent)
                self.sock.sendall(b"".join(frames[sent:sent + k]))
                sent += k
                self._drain(False)
            else:
                self._drain(True)
        return sent


def event_frames(pub, subject, bodies, id_prefix):
    """Frames as weir's http ingest writes them (runtime/flow/ingest.cc): Weir-Id, Nats-Msg-Id and
    Weir-Ingest-Us headers, the request body as the data."""
    frames = []
    now_us = str(int(time.time() * 1e6))
    for n, body in enumerate(bodies):
        try:
            eid = json.loads(body).get("id") or f"{id_prefix}-{n}"
        except ValueError:
            eid = f"{id_prefix}-{n}"
        eid = f"{id_prefix}{eid}"
        frames.append(pub.frame(subject, body, [("Weir-Id", eid), ("Nats-Msg-Id", eid),
                                                ("Weir-Ingest-Us", now_us)], n))
    return frames
