# SPDX-License-Identifier: Apache-2.0
"""test_grpc_watch: the WatchRoom server stream (issue 30, Exact catch-up) against a real
roomd, with the real gRPC client (tests/standins/grpc_client.js).
- backlog then live: a stream opened after some commands, kept open while more run, gets
  room_seq 1..N once each in order, and each event equal to the HTTP events read's item;
  after_seq N starts at N + 1;
- across an owner change: two nodes on one MariaDB and one Redis lease; a stream on the
  node that is not the owner and a stream on the owner; the owner is killed (-9) mid-way,
  the other node takes the room over and commands go on there; the first stream sees every
  event with no gap, the second breaks with the owner and, reconnected to the survivor with
  after_seq = the last room_seq it got, goes on with no gap and no duplicate;
- refusals: an unknown room NOT_FOUND; once retention purged the events OUT_OF_RANGE with
  the oldest available seq (message and the oldest-available-seq trailer); more streams than
  grpc.watch.max_streams RESOURCE_EXHAUSTED; grpc.max_calls_per_address: one address holding
  its cap of workers is refused more calls (counted), and served again once one ends;
- the endpoint x caller matrix for WatchRoom (test_http_auth's callers): every refused
  caller UNAUTHENTICATED / PERMISSION_DENIED, a user token and a service token of the app
  watch.
Run: python3 tests/integ/test_grpc_watch.py (PYTHONPATH=tests, ROOMD_BUILD_DIR=build-asan)."""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import http_util as hu  # noqa: E402
import test_grpc as tg  # noqa: E402
from roomd_test import Roomd, free_port, run, wait_until  # noqa: E402

OUT_OF_RANGE = 11
CANCELLED = 1


def grpc_node(grpc=None, tmp=None, env=None, **over):
    """A roomd serving gRPC on a free port with grpc.* of grpc merged in (and over)."""
    gport = free_port()
    cfg = {"grpc": dict({"listen": f"127.0.0.1:{gport}", "workers": 8}, **(grpc or {}))}
    cfg.update(over)
    rd = Roomd(cfg, tmp=tmp)
    rd.grpc_port = gport
    return rd.start(env=env)


def watch_start(port, rid, after=0, metadata=None, **kw):
    """A WatchRoom stream in a background client process; watch_end collects it."""
    call = dict({"service": "RoomService", "method": "WatchRoom", "stream": True,
                 "request": {"room_id": rid, "after_seq": after},
                 "metadata": metadata or {}, "deadline_ms": 120000}, **kw)
    p = subprocess.Popen(["node", tg.CLIENT, "--target", f"127.0.0.1:{port}"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdin.write(json.dumps([call]).encode())
    p.stdin.close()
    p.stdin = None
    return p


def watch_end(p, timeout=150):
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, err.decode()
    return json.loads(out)[0]


def watch(rd, rid, after=0, metadata=None, **kw):
    return tg.calls(rd, [dict({"method": "WatchRoom", "stream": True, "metadata": metadata or {},
                               "request": {"room_id": rid, "after_seq": after},
                               "deadline_ms": 60000}, **kw)])[0]


def http_events(rd, rid, after=0):
    """Every event after after by the HTTP events read, page by page."""
    out = []
    while True:
        js = hu.expect_ok(rd.http("GET", f"/v1/rooms/{rid}/events?after_seq={after}&limit=50"),
                          "events")
        out += js["events"]
        after = js["next_after_seq"]
        if not js["more"]:
            return out


def seqs(res):
    return [r["room_seq"] for r in res["responses"]]


def assert_exact(got, first, last, what):
    assert got == list(range(first, last + 1)), f"{what}: {got[:10]}..{got[-10:]} " \
                                                f"want {first}..{last}"


def commands(rd, rid, uids):
    """A join then a leave of each uid: two events each."""
    for u in uids:
        hu.expect_ok(hu.join(rd, rid, u), "join")
        hu.expect_ok(hu.leave(rd, rid, u), "leave")


def test_backlog_then_live():
    rd = grpc_node({"watch": {"poll_interval": "50ms"}})
    try:
        rid = hu.room_name("wl")
        hu.expect_ok(hu.create(rd, rid, owner=1), "create")
        hu.expect_ok(hu.join(rd, rid, 1), "owner joins")
        commands(rd, rid, range(10, 15))  # backlog: 12 events
        p = watch_start(rd.grpc_port, rid, idle_ms=3000)
        q = watch_start(rd.grpc_port, rid, after=7, idle_ms=3000)
        time.sleep(0.5)
        commands(rd, rid, range(20, 40))  # live: 40 events, while the streams are open
        hu.expect_ok(hu.join(rd, rid, 50), "one more")
        res, res7 = watch_end(p), watch_end(q)
        ev = http_events(rd, rid)
        n = len(ev)
        assert n == 53, n
        assert res["client_cancelled"] and res["code"] == CANCELLED, res["details"]
        assert_exact(seqs(res), 1, n, "from 0")
        assert_exact(seqs(res7), 8, n, "from 7")
        for r, e in zip(res["responses"], ev):
            assert json.loads(r["json"]) == e, (r, e)
            assert r["event_id"] == e["event_id"] and r["event_type"] == e["event_type"]
        assert [json.loads(r["json"]) for r in res7["responses"]] == ev[7:]
        m = hu.metrics(rd)
        assert m.get("roomd_grpc_watch_events_total", 0) >= n + n - 7, m
        assert m.get("roomd_grpc_watch_streams") == 0, m
        assert rd.stop() == 0  # ASan: nothing leaked or misused by the streams
    finally:
        rd.stop()


def test_refusals_and_max_streams():
    rd = grpc_node({"watch": {"max_streams": 2}},
                   store={"retention": {"delivered_max_age": "1s", "purge_interval": "200ms"}})
    try:
        res = watch(rd, "never-made", idle_ms=2000)
        tg.refused(res, tg.NOT_FOUND, "not_found", http_status=404, what="unknown room")
        res = watch(rd, "bad room id!", idle_ms=2000)
        assert res["code"] == tg.INVALID_ARGUMENT, (res["code"], res["details"])
        rid = hu.room_name("wp")
        hu.expect_ok(hu.create(rd, rid, owner=1), "create")
        for uid in (2, 3, 4):
            hu.expect_ok(hu.join(rd, rid, uid), "join")

        def gone():
            st, _, b = rd.http("GET", f"/v1/rooms/{rid}/events?after_seq=0")
            return st == 410 and b["error"]["oldest_available_seq"] == 5
        wait_until(gone, timeout=20, what="the delivered rows purged")
        res = watch(rd, rid, idle_ms=2000)
        tg.refused(res, OUT_OF_RANGE, "events_purged", http_status=410, what="purged")
        assert "oldest_available_seq=5" in res["details"], res["details"]
        assert res["trailing"].get("oldest-available-seq") == "5", res["trailing"]
        assert res["responses"] == [], res["responses"]
        # from the room's latest seq it watches on (opened first: seq 5 is purged a second
        # after its delivery)
        p = watch_start(rd.grpc_port, rid, after=4, idle_ms=2500)
        wait_until(lambda: hu.metrics(rd).get("roomd_grpc_watch_streams") == 1, timeout=10,
                   what="the stream open")
        hu.expect_ok(hu.join(rd, rid, 5), "join")
        assert seqs(watch_end(p)) == [5]
        # grpc.watch.max_streams 2: a third stream is refused while two are open, and the
        # other calls are served meanwhile
        p1 = watch_start(rd.grpc_port, rid, after=5, idle_ms=3000)
        p2 = watch_start(rd.grpc_port, rid, after=5, idle_ms=3000)
        wait_until(lambda: hu.metrics(rd).get("roomd_grpc_watch_streams") == 2, timeout=10,
                   what="two streams open")
        res = watch(rd, rid, after=5, idle_ms=1000)
        tg.refused(res, tg.RESOURCE_EXHAUSTED, "rate_limited", what="a third stream")
        assert "grpc.watch.max_streams" in res["details"], res["details"]
        tg.ok(tg.call(rd, "GetRoom", {"room_id": rid}), "a read while two streams are open")
        for p in (p1, p2):
            assert seqs(watch_end(p)) == []
        wait_until(lambda: hu.metrics(rd).get("roomd_grpc_watch_streams") == 0, timeout=10,
                   what="the streams' places given back")
        res = watch(rd, rid, after=5, idle_ms=1000)  # admitted: nothing new, ended by the client
        assert res["code"] == CANCELLED and res["client_cancelled"], (res["code"], res["details"])
        assert rd.stop() == 0
    finally:
        rd.stop()


def idle(rd, local, streams, rid):
    """h2_idle.js: streams calls with headers and no message on one connection from local
    (held until grpc.receive_timeout), then a real GetRoom from 127.0.0.1; its result."""
    out = subprocess.run(["node", os.path.join(tg.SOURCE, "tests", "standins", "h2_idle.js"),
                          "--target", f"127.0.0.1:{rd.grpc_port}", "--streams", str(streams),
                          "--probe-room", rid, "--hold-ms", "1500", "--local-address", local],
                         capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr.decode()
    return json.loads(out.stdout)


def test_per_address_cap():
    # issue 25: one address cannot take every gRPC worker (grpc.max_calls_per_address)
    rd = grpc_node({"max_calls_per_address": 4, "receive_timeout": "3s"})
    try:
        rid = hu.room_name("wa")
        hu.expect_ok(hu.create(rd, rid, owner=1), "create")
        before = hu.metrics(rd).get("roomd_grpc_refused_per_address_total", 0)
        # 6 idle calls from 127.0.0.2: 4 hold workers, 2 refused at once; 127.0.0.1 served
        r = idle(rd, "127.0.0.2", 6, rid)
        assert r["probe"]["code"] == 0, r
        assert r["codes"].get(str(tg.RESOURCE_EXHAUSTED)) == 2, r
        # the same from 127.0.0.1: its own further call is refused
        r = idle(rd, "127.0.0.1", 4, rid)
        assert r["probe"]["code"] == tg.RESOURCE_EXHAUSTED, r
        assert "grpc.max_calls_per_address" in r["probe"]["details"], r
        after = hu.metrics(rd).get("roomd_grpc_refused_per_address_total", 0)
        assert after - before == 3, (before, after)
        # once they timed out, the address is served again
        wait_until(lambda: tg.call(rd, "GetRoom", {"room_id": rid})["code"] == 0, timeout=10,
                   what="served again")
    finally:
        rd.stop()


def test_owner_killed_two_nodes():
    import test_lease_two_nodes as ln  # its two-node set-up: one MariaDB, one Redis lease
    store = ln.MysqlStore()
    nodes = []
    try:
        for name in ("a", "b"):
            gport = free_port()
            rd = ln.node(store, name, ln.REDIS_PORT, {"grpc": {
                "listen": f"127.0.0.1:{gport}", "workers": 8,
                "watch": {"poll_interval": "50ms"}}})
            rd.grpc_port = gport
            nodes.append(rd.start())
        a, b = nodes
        rid = hu.room_name("wk")
        hu.expect_ok(hu.create(a, rid, owner=1), "create on a: a owns the room")
        commands(a, rid, range(10, 13))
        on_b = watch_start(b.grpc_port, rid, idle_ms=8000)  # served by the node that is not owner
        on_a = watch_start(a.grpc_port, rid, idle_ms=8000)  # served by the owner, killed below
        def sent(rd, n):  # the node's streams sent n events (the client has them soon after)
            wait_until(lambda: hu.metrics(rd).get("roomd_grpc_watch_events_total", 0) >= n,
                       timeout=20, what=f"{n} events sent on {rd.cfg['app']['node_id']}")
        sent(a, 7)
        sent(b, 7)
        commands(a, rid, range(20, 25))
        sent(a, 17)
        time.sleep(0.5)
        a.kill()
        took, _ = ln.join_until_ok(b, rid, 30, timeout=ln.TTL_MS / 1000 + 10)
        commands(b, rid, range(40, 45))
        res_a = watch_end(on_a)
        assert res_a["code"] not in (0, CANCELLED), ("the owner's stream ended with it", res_a)
        got_a = seqs(res_a)
        last = got_a[-1] if got_a else 0
        again = watch_start(b.grpc_port, rid, after=last, idle_ms=3000)  # the client reconnects
        res_b, res_again = watch_end(on_b), watch_end(again)
        ev = http_events(b, rid)
        n = len(ev)
        assert n == 1 + 6 + 10 + 1 + 10, n
        assert_exact(seqs(res_b), 1, n, "the survivor's stream across the owner's kill -9")
        assert_exact(got_a + seqs(res_again), 1, n, "the owner's stream, then reconnected")
        assert last >= 7, ("the owner's stream had the events before the kill", last)
        assert [json.loads(r["json"]) for r in res_b["responses"]] == ev
        assert [json.loads(r["json"]) for r in res_a["responses"] + res_again["responses"]] == ev
        print(f"  takeover {took:.2f}s; {n} events on both streams, no gap, no duplicate "
              f"(the owner's stream broke after room_seq {last})")
    finally:
        ln.stop_all(*nodes)
        store.close()


def test_auth_matrix_watch():
    # WatchRoom in the endpoint x caller matrix: test_http_auth's callers (and test_grpc's)
    import jwt_util as jw
    import test_http_auth as ha
    rd = grpc_node(env=ha.ENV, auth={"mode": "jwt", "jwt": {"hs256_secret_env": "ROOMD_TEST_JWT",
                                                            "leeway": "0s"}},
                   admin={"token_env": "ROOMD_TEST_ADMIN"})
    try:
        def md(headers):
            return {k.lower(): v for k, v in headers.items()}
        owner, uid = 801, 802
        rid = hu.room_name("wm")
        tg.ok(tg.call(rd, "CreateRoom", {"command_id": hu.cid(), "room_id": rid, "owner_uid": owner,
                                         "title": "t"}, md(ha.tok(owner))), "create")
        batch, want = [], []
        for cname, h, status in ha.callers(uid):
            if cname == "other uid":
                continue  # a read of the room: any user of the app may
            batch.append({"method": "WatchRoom", "stream": True, "metadata": md(h),
                          "request": {"room_id": rid}, "idle_ms": 3000, "deadline_ms": 10000})
            want.append((cname, status))
        # a token of another app naming its own app: the room is not its app's
        batch.append({"method": "WatchRoom", "stream": True, "request": {"room_id": rid},
                      "metadata": md(ha.tok(uid, app="otherapp")), "idle_ms": 3000})
        want.append(("other app's own", 404))
        for r, (what, status) in zip(tg.calls(rd, batch), want):
            assert r["responses"] == [], (what, r["responses"])
            if status == 404:
                tg.refused(r, tg.NOT_FOUND, "not_found", http_status=404, what=what)
                continue
            tg.refused(r, tg.UNAUTHENTICATED if status == 401 else tg.PERMISSION_DENIED,
                       "unauthenticated" if status == 401 else "forbidden",
                       http_status=status, what=what)
        # allowed: a user of the app (any uid), and a service token
        for what, h in (("a user", md(ha.tok(uid))), ("the owner", md(ha.tok(owner))),
                        ("a service", md(ha.service()))):
            r = watch(rd, rid, metadata=h, max_messages=1)
            assert r["client_cancelled"] and seqs(r) == [1], (what, r["code"], r["details"])
        # a token that expires while the stream is open ends it (every read is authorized)
        short = {"authorization": "Bearer " + jw.hs256(ha.SECRET, jw.claims(uid, ttl=1))}
        r = watch(rd, rid, metadata=short, idle_ms=20000, deadline_ms=60000)
        assert seqs(r) == [1] and r["code"] == tg.UNAUTHENTICATED, (r["code"], r["details"])
        assert ha.SECRET not in open(rd.log_path).read()
        assert rd.stop() == 0
    finally:
        rd.stop()


def test_stop_ends_streams():
    # SIGTERM with streams open: each ends UNAVAILABLE at its next poll (not by the 5 s
    # shutdown grace's cancel of every call)
    rd = grpc_node()
    try:
        rid = hu.room_name("ws")
        hu.expect_ok(hu.create(rd, rid, owner=1), "create")
        ps = [watch_start(rd.grpc_port, rid, idle_ms=30000) for _ in range(3)]
        wait_until(lambda: hu.metrics(rd).get("roomd_grpc_watch_streams") == 3, timeout=10,
                   what="three streams open")
        assert rd.stop() == 0
        for p in ps:
            res = watch_end(p)
            assert seqs(res) == [1], res
            # ended by the stream itself, not by the shutdown grace's cancel of every call
            assert res["code"] == tg.UNAVAILABLE and "stopping" in res["details"], \
                (res["code"], res["details"])
    finally:
        rd.stop()


if __name__ == "__main__":
    run([test_backlog_then_live, test_refusals_and_max_streams, test_per_address_cap,
         test_owner_killed_two_nodes, test_auth_matrix_watch, test_stop_ends_streams])
