# SPDX-License-Identifier: Apache-2.0
"""bus_util: what the broker tests share, written from the protocol docs and independent of
roomd's C code, so the tests check roomd against a second implementation:

- Nats: a minimal NATS client over a socket (CONNECT, SUB, PUB/HPUB, MSG/HMSG, PING/PONG) with
  request(); js_* helpers speak the JetStream JSON API ($JS.API.*) through it.
- NatsServer: a PRIVATE nats-server -js on a free port with its own store dir, stopped and
  started by the test (broker-down scenarios); the shared server is scripts/servers.sh's.
- pb_fields / pb_encode: just enough protobuf (varint and length-delimited fields) to read the
  RoomOutboxEvent envelope and payloads and to write a RocketLaunchWakeup.
"""
import base64
import itertools
import json
import os
import socket
import subprocess
import time

from roomd_test import free_port

_sid = itertools.count(1)


class Nats:
    def __init__(self, port, timeout=5):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        # every request is a few small writes answered by a small reply: with Nagle's
        # algorithm on, each one waited for the server's delayed ACK (~40 ms a request)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.requests = 0  # requests sent (js_all's cost is checked by counting them)
        info = self._line()
        assert info.startswith(b"INFO"), info
        self._send(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,'
                   b'"no_responders":true,"protocol":1,"name":"bus_util"}\r\nPING\r\n')
        while self._line() != b"PONG":
            pass

    def close(self):
        self.sock.close()

    def _send(self, b):
        self.sock.sendall(b)

    def _fill(self):
        d = self.sock.recv(65536)
        if not d:
            raise ConnectionError("nats closed the connection")
        self.buf += d

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _bytes(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        d, self.buf = self.buf[:n], self.buf[n + 2:]
        return d

    def _next_delivery(self):
        """(subject, sid, reply, headers, data) of the next MSG/HMSG; answers PINGs. A
        JetStream push delivery carries the message's own subject: tell it apart by sid."""
        while True:
            line = self._line()
            if line == b"PING":
                self._send(b"PONG\r\n")
                continue
            if line in (b"PONG", b"+OK") or line.startswith(b"INFO"):
                continue
            if line.startswith(b"-ERR"):
                raise RuntimeError(line.decode())
            parts = [p.decode() for p in line.split()]
            if parts[0] == "MSG":  # MSG subject sid [reply] size
                n = int(parts[-1])
                reply = parts[3] if len(parts) == 5 else ""
                return parts[1], parts[2], reply, {}, self._bytes(n)
            if parts[0] == "HMSG":  # HMSG subject sid [reply] header_size total_size
                hl, tl = int(parts[-2]), int(parts[-1])
                reply = parts[3] if len(parts) == 6 else ""
                raw = self._bytes(tl)
                return parts[1], parts[2], reply, parse_headers(raw[:hl]), raw[hl:]
            raise RuntimeError(f"unexpected {line!r}")

    def request(self, subject, payload=b"", headers=None, timeout=5):
        """Publishes with a reply inbox; returns (subject, headers, data) of the reply."""
        if isinstance(payload, str):
            payload = payload.encode()
        sid = next(_sid)
        inbox = f"_INBOX.bus_util.{os.getpid()}.{sid}"
        self.sock.settimeout(timeout)
        self._send(f"SUB {inbox} {sid}\r\nUNSUB {sid} 1\r\n".encode()
                   + self._pub(subject, inbox, payload, headers))
        self.requests += 1
        while True:
            # a delivery still in flight to a subscription js_all has ended is skipped
            subj, got, _, hdrs, data = self._next_delivery()
            if got == str(sid):
                return subj, hdrs, data

    @staticmethod
    def _pub(subject, reply, payload, headers=None):
        """The PUB (or HPUB with headers) command of one message, as bytes."""
        if headers:
            hdr = b"NATS/1.0\r\n" + b"".join(f"{k}: {v}\r\n".encode() for k, v in headers.items()) \
                + b"\r\n"
            return (f"HPUB {subject} {reply} {len(hdr)} {len(hdr) + len(payload)}\r\n".encode()
                    + hdr + payload + b"\r\n")
        return f"PUB {subject} {reply} {len(payload)}\r\n".encode() + payload + b"\r\n"

    def api(self, what, body=None):
        _, hdrs, data = self.request(f"$JS.API.{what}", json.dumps(body) if body else b"")
        if hdrs.get(":status") == "503":
            raise RuntimeError(f"{what}: no responders (JetStream down?)")
        return json.loads(data)


def parse_headers(raw):
    lines = raw.decode().split("\r\n")
    out = {}
    first = lines[0].split(" ", 2)  # "NATS/1.0 503" carries a status
    if len(first) > 1:
        out[":status"] = first[1]
    for l in lines[1:]:
        if ": " in l:
            k, v = l.split(": ", 1)
            out[k] = v
    return out


# ---- JetStream ----

def js_stream_info(nc, stream):
    r = nc.api(f"STREAM.INFO.{stream}")
    return None if "error" in r else r


def js_stream_count(nc, stream):
    r = js_stream_info(nc, stream)
    return r["state"]["messages"] if r else 0


def js_get(nc, stream, seq):
    """(subject, headers, data) of message seq of stream, or None."""
    r = nc.api(f"STREAM.MSG.GET.{stream}", {"seq": seq})
    if "error" in r:
        return None
    m = r["message"]
    hdrs = parse_headers(base64.b64decode(m["hdrs"])) if m.get("hdrs") else {}
    return m["subject"], hdrs, base64.b64decode(m.get("data", ""))


def js_all(nc, stream, timeout=10):
    """Every message of stream as (subject, headers, data), in sequence order (deleted
    sequences skipped), read in one pass: an ephemeral push consumer (deliver all, ack none,
    replay instant) streams them to an inbox, and the pass ends at the delivery whose
    pending count is 0. Three requests whatever the stream's size (info, create, delete)
    where one STREAM.MSG.GET per message took ~2000 round trips for 2000 messages."""
    info = js_stream_info(nc, stream)
    if not info or info["state"]["messages"] == 0:
        return []
    dsid, rsid = next(_sid), next(_sid)
    deliver = f"_INBOX.bus_util.{os.getpid()}.{dsid}"
    reply = f"_INBOX.bus_util.{os.getpid()}.{rsid}"
    cfg = {"stream_name": stream,
           "config": {"deliver_subject": deliver, "deliver_policy": "all", "ack_policy": "none",
                      "replay_policy": "instant", "inactive_threshold": 30 * 10**9}}
    nc.sock.settimeout(timeout)
    # the deliveries can come before the create's reply: both subscriptions are read below
    nc._send(f"SUB {deliver} {dsid}\r\nSUB {reply} {rsid}\r\nUNSUB {rsid} 1\r\n".encode()
             + nc._pub(f"$JS.API.CONSUMER.CREATE.{stream}", reply, json.dumps(cfg).encode()))
    nc.requests += 1
    out, name, done = [], None, False
    while not done or name is None:
        subject, sid, ack, hdrs, data = nc._next_delivery()
        if sid == str(rsid):
            r = json.loads(data)
            if "error" in r:
                raise RuntimeError(f"CONSUMER.CREATE.{stream}: {r['error']}")
            name = r["name"]
            continue
        # $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ts>.<pending>
        tok = ack.split(".")
        assert sid == str(dsid) and tok[:2] == ["$JS", "ACK"], (sid, ack)
        out.append((subject, hdrs, data))
        done = int(tok[-1]) == 0
    nc._send(f"UNSUB {dsid}\r\n".encode())
    js_delete_consumer(nc, stream, name)
    return out


def js_consumer_info(nc, stream, consumer):
    r = nc.api(f"CONSUMER.INFO.{stream}.{consumer}")
    return None if "error" in r else r


def js_consumer_idle(nc, stream, consumer):
    """True when the durable consumer exists and has nothing pending or unacknowledged."""
    ci = js_consumer_info(nc, stream, consumer)
    return bool(ci) and ci["num_pending"] == 0 and ci["num_ack_pending"] == 0


def js_delete_consumer(nc, stream, consumer):
    return nc.api(f"CONSUMER.DELETE.{stream}.{consumer}")


def js_delete_stream(nc, stream):
    return nc.api(f"STREAM.DELETE.{stream}")


def js_publish(nc, subject, data, msg_id=None, headers=None):
    h = dict(headers or {})
    if msg_id:
        h["Nats-Msg-Id"] = msg_id
    _, _, ack = nc.request(subject, data, h or None)
    return json.loads(ack)


# ---- a private nats-server ----

class NatsServer:
    def __init__(self, tmp):
        self.port = free_port()
        self.dir = os.path.join(tmp, f"nats-{self.port}")
        self.proc = None

    def url(self):
        return f"nats://127.0.0.1:{self.port}"

    def start(self, js=True):
        """js=False: the server without JetStream (its API answers "No Responders")."""
        self.log = open(self.dir + ".log", "ab")
        self.proc = subprocess.Popen(["nats-server"] + (["-js"] if js else []) +
                                     ["-a", "127.0.0.1", "-p", str(self.port), "-sd", self.dir],
                                     stdout=self.log, stderr=self.log)
        end = time.time() + 15
        while time.time() < end:
            try:
                Nats(self.port).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("private nats-server did not start")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(15)
        self.proc = None


# ---- protobuf, just enough ----

def _varint(b, i):
    shift = v = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return v, i


def pb_fields(b):
    """{field_number: value} of a message (last wins; bytes for length-delimited)."""
    out, i = {}, 0
    while i < len(b):
        key, i = _varint(b, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 2:
            n, i = _varint(b, i)
            v, i = bytes(b[i:i + n]), i + n
        elif wt == 1:
            v, i = b[i:i + 8], i + 8
        elif wt == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wt}")
        out[num] = v
    return out


def _enc_varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        c = v & 0x7F
        v >>= 7
        if v:
            out.append(c | 0x80)
        else:
            out.append(c)
            return bytes(out)


def pb_encode(fields):
    """fields: [(number, value)] with int -> varint, str/bytes -> length-delimited."""
    out = bytearray()
    for num, v in fields:
        if isinstance(v, int):
            out += _enc_varint(num << 3) + _enc_varint(v)
        else:
            v = v.encode() if isinstance(v, str) else v
            out += _enc_varint(num << 3 | 2) + _enc_varint(len(v)) + v
    return bytes(out)


def pb_repeated(b, number):
    """Every length-delimited value of field number in message b, in order."""
    out, i = [], 0
    while i < len(b):
        key, i = _varint(b, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            _, i = _varint(b, i)
        elif wt == 2:
            n, i = _varint(b, i)
            if num == number:
                out.append(bytes(b[i:i + n]))
            i += n
        elif wt == 1:
            i += 8
        elif wt == 5:
            i += 4
        else:
            raise ValueError(f"wire type {wt}")
    return out


def envelope(data):
    """The RoomOutboxEvent fields a test looks at."""
    f = pb_fields(data)
    s = lambda n: f.get(n, b"").decode()  # noqa: E731
    meta = {}
    for entry in pb_repeated(data, 10):  # map<string, string> metadata
        e = pb_fields(entry)
        meta[e.get(1, b"").decode()] = e.get(2, b"").decode()
    return {"event_id": s(1), "app_code": s(2), "room_id": s(3), "room_version": f.get(4, 0),
            "event_type": s(5), "occurred_at_ms": f.get(6, 0), "command_id": s(7),
            "payload": f.get(8, b""), "room_seq": f.get(9, 0), "metadata": meta}
