# SPDX-License-Identifier: Apache-2.0
"""test_bus_util: the tests' own NATS client (bus_util) against the shared nats-server, so the
broker tests that read streams back through it can trust what it returns.

1. js_all returns every message of a stream (subject, headers, payload) in sequence order,
   skipping a deleted sequence, exactly as STREAM.MSG.GET of each sequence does; it costs
   three requests whatever the stream's size (not one per message), and leaves no consumer.
2. the client's socket has TCP_NODELAY: a request's small writes do not wait for the
   server's delayed ACK.
3. a request's reply is told apart from a delivery to another subscription still in flight
   (js_all ends its push consumer while the stream grows: the late deliveries are skipped;
   once they were taken for the next request's reply, and test_bus_roomd's rocket test failed
   on a protobuf payload parsed as JSON).

Run: python3 tests/integ/test_bus_util.py (PYTHONPATH=tests, ROOMD_NATS_PORT)
"""
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(__file__))
from roomd_test import env_port, need, run  # noqa: E402
from bus_util import Nats, js_all, js_delete_stream, js_get, js_publish  # noqa: E402

NATS_PORT = env_port("ROOMD_NATS_PORT", 4333)
STREAM = f"t{os.urandom(3).hex()}_bus_util"
N = 500


def test_js_all_one_pass():
    nc = Nats(NATS_PORT)
    try:
        r = nc.api(f"STREAM.CREATE.{STREAM}", {"name": STREAM, "subjects": [STREAM + ".>"],
                                              "storage": "memory"})
        assert "error" not in r, r
        for i in range(N):
            hdrs = {"X-Kind": f"k{i % 3}"} if i % 2 else None
            ack = js_publish(nc, f"{STREAM}.e{i % 4}", f"payload-{i}".encode(), f"id-{i}", hdrs)
            assert ack["seq"] == i + 1, ack
        r = nc.api(f"STREAM.MSG.DELETE.{STREAM}", {"seq": 7})
        assert r.get("success"), r
        one_by_one = [m for m in (js_get(nc, STREAM, s) for s in range(1, N + 1)) if m]
        assert len(one_by_one) == N - 1
        before = nc.requests
        got = js_all(nc, STREAM)
        cost = nc.requests - before
        assert got == one_by_one, "js_all differs from STREAM.MSG.GET of each sequence"
        assert got[0] == (f"{STREAM}.e0", {"Nats-Msg-Id": "id-0"}, b"payload-0"), got[0]
        assert got[6][2] == b"payload-7", "the deleted sequence 7 was returned"
        assert cost <= 3, f"js_all of {N} messages took {cost} requests"
        left = nc.api(f"CONSUMER.LIST.{STREAM}")
        assert left["total"] == 0, f"js_all left a consumer: {left}"
        assert js_all(nc, STREAM) == got, "a second pass differs"
    finally:
        js_delete_stream(nc, STREAM)
        nc.close()


def test_request_skips_other_deliveries():
    nc, other = Nats(NATS_PORT), Nats(NATS_PORT)
    try:
        subject = f"{STREAM}.stray"
        nc._send(f"SUB {subject} 999999\r\n".encode())
        nc.request("$JS.API.INFO")  # the SUB is in place
        for i in range(3):
            other._send(other._pub(subject, "", f"stray-{i}".encode()))
        other.request("$JS.API.INFO")  # the strays have left the server
        r = nc.api("INFO")
        assert r.get("type") == "io.nats.jetstream.api.v1.account_info_response", r
    finally:
        nc.close()
        other.close()


def test_socket_nodelay():
    nc = Nats(NATS_PORT)
    try:
        assert nc.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        nc.close()


if __name__ == "__main__":
    need("127.0.0.1", NATS_PORT, "nats-server")
    run([test_js_all_one_pass, test_request_skips_other_deliveries, test_socket_nodelay])
