# SPDX-License-Identifier: Apache-2.0
"""test_bus_roomd: the broker modes end to end, a real roomd process against a real
nats-server (the shared one of scripts/servers.sh, or a PRIVATE one for broker-down), the
consumer groups inside roomd and in tools/roomd_consumer, and the IM stand-in.

1. mq: every event of every command is in the outbox stream exactly once, keyed by its
   event_id (Nats-Msg-Id), on "<ns>hyapp_room_outbox.<event_type>"; a restart republishes
   nothing.
2. dual: the log sink (the direct part) and the stream both get every event once.
3. broker down: commands succeed at once, rows go retryable; the broker comes back: every
   row delivered, each event in the stream once.
4. a consumer group down: room_outbox is untouched (all delivered, no retries); the broker
   holds the group's backlog; the group drains it when it returns.
5. one event_id consumed by all three groups (IM bridge in roomd, activity and notice in
   roomd_consumer); then every group's cursor is reset (durable consumers deleted) while
   down: everything is redelivered and no group repeats a side effect (IM calls, C2C
   notices, activity totals).
6. dead letter: IM failing, the IM bridge gives each event 1 + consumer_max_reconsume_times
   deliveries, then it is in "<ns>hyapp_dlq.hyapp-room-im-bridge".
7. rocket: the wake-up fires within 1 s of launch_at_ms, also across a roomd restart (SIGTERM
   and SIGKILL); duplicate and stale wake-ups change nothing.
8. circuit without traffic: a node whose bus circuit opened while its broker was down, and
   which then has no rows (another node on the store delivered them), stays "degraded" while
   the broker is down and is "ready" again soon after it returns, without an event.
9. JetStream not answering ("No Responders", a nats-server without JetStream): an outage,
   retry_count stays 0; JetStream back: every row delivered once.
10. inbox retention: a key older than the inbox's keep time that was never settled is
   purged at start and counted in roomd_consumer_inbox_purged_unsettled_total{group}.

Run: python3 tests/integ/test_bus_roomd.py (PYTHONPATH=tests, ROOMD_BUILD_DIR=build)
"""
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "standins"))
from roomd_test import BUILD, Roomd, env_port, merge, need, run, wait_until  # noqa: E402
from bus_util import (Nats, NatsServer, envelope, js_all, js_consumer_idle,  # noqa: E402
                      js_delete_consumer, js_delete_stream, js_publish, pb_encode, pb_fields)
from http_util import cid, metrics, room_name  # noqa: E402

NATS_PORT = env_port("ROOMD_NATS_PORT", 4333)
SHARED = f"nats://127.0.0.1:{NATS_PORT}"
RUN = os.urandom(3).hex()
CONSUMER_BIN = os.path.join(BUILD, "roomd_consumer")
G_IM, G_ACT, G_NOTICE, G_ROCKET = ("hyapp-room-im-bridge", "hyapp-activity-room-outbox",
                                   "hyapp-notice-room-outbox", "hyapp-room-rocket-open")
_ns = [0]


def new_ns():
    _ns[0] += 1
    return f"t{RUN}_{_ns[0]}_"


def bus_cfg(tmp, ns, url=SHARED, extra=None):
    cfg = {
        "rocketmq": {
            "enabled": True, "name_servers": [url], "namespace": ns, "send_timeout": "1s",
            "retry": 1, "consumer_store_dir": os.path.join(tmp, "consumers"),
            "consumer_retry_delays_ms": [200, 400], "consumer_ack_wait": "2s",
            "room_outbox": {"enabled": True, "consumer_max_reconsume_times": 2},
            "rocket_launch": {"enabled": False}},
        "outbox_worker": {"publish_mode": "mq", "max_retry_count": 30,
                          "initial_backoff": "100ms", "max_backoff": "500ms"},
    }
    return merge(cfg, extra or {})


def cleanup(ns):
    try:
        nc = Nats(NATS_PORT)
        for s in ("hyapp_room_outbox", "hyapp_room_rocket_launch", "hyapp_dlq"):
            js_delete_stream(nc, ns + s)
        nc.close()
    except OSError:
        pass


def outbox(r, cols="status, retry_count, sinks_done, last_error"):
    con = sqlite3.connect(f"file:{r.cfg['store']['sqlite']['path']}?mode=ro", uri=True,
                          timeout=10)
    try:
        rows = con.execute(f"SELECT event_id, {cols} FROM room_outbox ORDER BY id").fetchall()
    finally:
        con.close()
    return {row[0]: row[1:] for row in rows}


def all_delivered(r):
    rows = outbox(r)
    return rows if rows and all(v[0] == "delivered" for v in rows.values()) else None


def db_rows(path, sql):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def totals(db):
    """activity_room_totals rows, or None while the group has not created its tables."""
    try:
        return db_rows(db, "SELECT gifts, gift_value FROM activity_room_totals")
    except sqlite3.OperationalError:
        return None


def group_db(tmp, group):
    return os.path.join(tmp, "consumers", f"{group}.db")


def ok(res, what=""):
    st, _, js = res
    assert st in (200, 201), f"{what}: {st} {js}"  # CreateRoom: 201
    return js


class Events:
    """Runs commands and collects (event_id, event_type) of every reply."""

    def __init__(self, r):
        self.r, self.ev = r, []

    def do(self, path, body):
        js = ok(self.r.post(path, dict(body, command_id=cid())), path)
        self.ev += [(e["event_id"], e["event_type"]) for e in js["events"]]
        return js

    def room(self, room, members=(1, 5, 6)):
        self.do("/v1/rooms", {"room_id": room, "owner_uid": 1, "title": "bus"})
        for u in members:
            self.do(f"/v1/rooms/{room}/join", {"uid": u})
        return self

    def gift(self, room, count=1, unit_price=10, uid=5, to_uid=1):
        return self.do(f"/v1/rooms/{room}/gifts", {"uid": uid, "to_uid": to_uid,
                                                   "gift_id": "rose", "count": count,
                                                   "unit_price": unit_price})

    def ids(self):
        return [e for e, _ in self.ev]


def standard_commands(r, room):
    ev = Events(r).room(room)
    ev.do(f"/v1/rooms/{room}/mic/up", {"uid": 5})
    ev.gift(room, 2, 10)
    ev.do(f"/v1/rooms/{room}/kick", {"operator_uid": 1, "uid": 6, "reason": "spam"})
    ev.do(f"/v1/rooms/{room}/leave", {"uid": 5})
    return ev


def stream_by_id(nc, stream):
    out = {}
    for subj, hdrs, data in js_all(nc, stream):
        mid = hdrs["Nats-Msg-Id"]
        assert mid not in out, f"event {mid} twice in {stream}"
        out[mid] = (subj, envelope(data))
    return out


def start_consumer(r, groups, env=None):
    log = open(os.path.join(r.tmp, "consumer.out"), "ab")
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.Popen([CONSUMER_BIN, "-c", r.cfg_path, "-g", groups], stdout=log,
                            stderr=log, env=e)


def stop_proc(p):
    if p and p.poll() is None:
        p.send_signal(signal.SIGTERM)
        p.wait(20)


# ---- 1 ----

def test_mq_every_event_once():
    tmp, ns = tempfile.mkdtemp(prefix="bus-mq-"), new_ns()
    r = Roomd(bus_cfg(tmp, ns), tmp=tmp).start()
    try:
        ev = standard_commands(r, room_name())
        rows = wait_until(lambda: all_delivered(r), timeout=20, what="all rows delivered")
        assert set(rows) == set(ev.ids())
        assert all(v[2] & 8 for v in rows.values()), rows  # SINK_BIT_BUS done
        nc = Nats(NATS_PORT)
        got = stream_by_id(nc, ns + "hyapp_room_outbox")
        assert set(got) == set(ev.ids()), (sorted(got), sorted(ev.ids()))
        for eid, etype in ev.ev:
            subj, env = got[eid]
            assert subj == f"{ns}hyapp_room_outbox.{etype}", subj
            assert env["event_id"] == eid and env["event_type"] == etype
            assert env["app_code"] == "hyapp" and env["room_version"] > 0
        # A restart finds nothing to publish again.
        r.stop()
        r.start()
        time.sleep(1.0)
        assert len(js_all(nc, ns + "hyapp_room_outbox")) == len(ev.ids())
        nc.close()
    finally:
        r.stop()
        cleanup(ns)


# ---- 2 ----

def test_dual_log_sink_and_stream():
    tmp, ns = tempfile.mkdtemp(prefix="bus-dual-"), new_ns()
    r = Roomd(bus_cfg(tmp, ns, extra={"outbox_worker": {"publish_mode": "dual"}}),
              tmp=tmp).start()
    try:
        ev = standard_commands(r, room_name())
        rows = wait_until(lambda: all_delivered(r), timeout=20, what="all rows delivered")
        assert all(v[2] & 9 == 9 for v in rows.values()), rows  # log + bus sinks done
        logged = [e["event_id"] for e in r.events()]
        assert sorted(logged) == sorted(ev.ids())
        nc = Nats(NATS_PORT)
        assert set(stream_by_id(nc, ns + "hyapp_room_outbox")) == set(ev.ids())
        nc.close()
    finally:
        r.stop()
        cleanup(ns)


# ---- 3 ----

def delivered_once(r, srv, ns, ev, what):
    """Waits until every row of r is delivered; then the outbox stream on srv holds each
    event of ev exactly once."""
    wait_until(lambda: all_delivered(r), timeout=30, what=what)
    nc = Nats(srv.port)
    try:
        assert set(stream_by_id(nc, ns + "hyapp_room_outbox")) == set(ev.ids())
    finally:
        nc.close()


def test_broker_down_commands_succeed_then_published():
    tmp, ns = tempfile.mkdtemp(prefix="bus-down-"), new_ns()
    srv = NatsServer(tmp)  # not started: the broker is down
    r = Roomd(bus_cfg(tmp, ns, url=srv.url(), extra={"outbox_worker": {
        "max_retry_count": 3, "initial_backoff": "100ms", "max_backoff": "200ms",
        "circuit_failures": 2, "circuit_probe_every": "300ms"}}), tmp=tmp).start()
    try:
        t0 = time.time()
        ev = standard_commands(r, room_name())
        per_cmd = (time.time() - t0) / 8
        assert per_cmd < 0.5, f"commands waited for the broker: {per_cmd:.3f}s each"
        # the broker down is an outage: retried without counting an attempt (issue 12),
        # for longer than max_retry_count x max_backoff (30 x 500 ms would be 15 s; the
        # test's own config below makes it 3 x 200 ms), and no row fails
        rows = wait_until(lambda: (lambda o: o if o and all(v[3] for v in o.values())
                                   else None)(outbox(r)), timeout=15, what="rows retried")
        time.sleep(2.0)
        rows = outbox(r)
        assert all(v[0] in ("retryable", "delivering") and v[1] == 0 for v in rows.values()), rows
        assert any("bus" in (v[3] or "") for v in rows.values()), rows
        srv.start()
        delivered_once(r, srv, ns, ev, "delivered after the broker")
    finally:
        r.stop()
        srv.stop()


# ---- 4 ----

def test_consumer_group_down_backlog():
    tmp, ns = tempfile.mkdtemp(prefix="bus-backlog-"), new_ns()
    r = Roomd(bus_cfg(tmp, ns), tmp=tmp).start()
    cons = None
    try:
        room = room_name()
        ev = Events(r).room(room)
        for i in range(5):
            ev.gift(room, i + 1, 10)
        rows = wait_until(lambda: all_delivered(r), timeout=20, what="delivered")
        assert all(v[1] == 0 for v in rows.values()), "room_outbox saw retries"
        cons = start_consumer(r, "activity")
        db = group_db(tmp, G_ACT)
        wait_until(lambda: os.path.exists(db) and totals(db) == [(15, 150)], timeout=20,
                   what="activity drained the backlog")
        stop_proc(cons)
        for i in range(3):
            ev.gift(room, 1, 100)
        wait_until(lambda: all_delivered(r), timeout=20, what="delivered while group down")
        nc = Nats(NATS_PORT)
        ci = nc.api(f"CONSUMER.INFO.{ns}hyapp_room_outbox.{G_ACT}")
        assert ci["num_pending"] == 3, ci  # the broker holds the group's backlog
        cons = start_consumer(r, "activity")
        wait_until(lambda: totals(db) == [(18, 450)], timeout=20,
                   what="backlog drained after the return")
        wait_until(lambda: js_consumer_idle(nc, ns + "hyapp_room_outbox", G_ACT), timeout=10)
        done = db_rows(db, "SELECT key FROM inbox WHERE state = 'done'")
        assert sorted(k for (k,) in done) == sorted(ev.ids())
        nc.close()
    finally:
        stop_proc(cons)
        r.stop()
        cleanup(ns)


# ---- 5 ----

def im_calls_count(im):
    return len([c for c in im.calls() if not c.get("api", "").startswith("_")])


def test_three_groups_and_forced_redelivery():
    from standins import ImStandin, TEST_SECRET
    tmp, ns = tempfile.mkdtemp(prefix="bus-groups-"), new_ns()
    im = ImStandin(tmp).start()
    env = {"TIM_TEST_SECRET": TEST_SECRET}
    r = Roomd(bus_cfg(tmp, ns, extra={
        "tencent_im": im.conf(),
        "rocketmq": {"room_outbox": {"tencent_im_consumer_enabled": True}}}), tmp=tmp)
    r.start(env=env)
    cons = start_consumer(r, "activity,notice", env=env)
    nc = Nats(NATS_PORT)
    stream = ns + "hyapp_room_outbox"
    groups = (G_IM, G_ACT, G_NOTICE)
    try:
        room = room_name()
        ev = Events(r).room(room)
        ev.gift(room, 3, 10)
        kick = ev.do(f"/v1/rooms/{room}/kick", {"operator_uid": 1, "uid": 6, "reason": "spam"})
        kicked = [e["event_id"] for e in kick["events"] if e["event_type"] == "RoomUserKicked"][0]
        wait_until(lambda: all_delivered(r), timeout=20)
        wait_until(lambda: all(js_consumer_idle(nc, stream, g) for g in groups), timeout=30,
                   what="three groups consumed everything")
        # The kick's event_id, consumed by each group:
        for g in groups:
            st = db_rows(group_db(tmp, g), f"SELECT state FROM inbox WHERE key = '{kicked}'")
            assert st == [("done",)], (g, st)
        assert im.messages(kicked), "IM bridge: no group message for the kick"
        notice = db_rows(group_db(tmp, G_NOTICE),
                         "SELECT event_id, uid, status FROM notice_delivery_events")
        assert notice == [(kicked, 6, "sent")], notice
        c2c = im.state_now()["c2c"]
        assert len(c2c) == 1 and c2c[0]["To_Account"] == "6" and \
            json.loads(c2c[0]["Data"])["event_id"] == kicked, c2c
        assert db_rows(group_db(tmp, G_ACT), "SELECT gifts, gift_value FROM activity_room_totals") \
            == [(3, 30)]
        for eid in ev.ids():  # every event of the room went through the bridge
            assert im.messages(eid), f"IM bridge: no message for {eid}"
        calls_before = im_calls_count(im)

        # Forced redelivery: every group's cursor is reset while the groups are down.
        stop_proc(cons)
        r.stop()
        for g in groups:
            js_delete_consumer(nc, stream, g)
        r.start(env=env)
        cons = start_consumer(r, "activity,notice", env=env)
        wait_until(lambda: all(js_consumer_idle(nc, stream, g) for g in groups), timeout=30,
                   what="the redelivered stream consumed again")
        time.sleep(0.5)
        assert im_calls_count(im) == calls_before, "a redelivery repeated an IM call"
        assert len(im.state_now()["c2c"]) == 1
        assert db_rows(group_db(tmp, G_ACT), "SELECT gifts, gift_value FROM activity_room_totals") \
            == [(3, 30)]
        assert db_rows(group_db(tmp, G_NOTICE), "SELECT COUNT(*) FROM notice_delivery_events") \
            == [(1,)]
    finally:
        nc.close()
        stop_proc(cons)
        r.stop()
        im.stop()
        cleanup(ns)


# ---- 6 ----

@contextlib.contextmanager
def im_dead_letters(prefix, joins=2):
    """roomd with the IM bridge group (ImStandin, 1 s timeout): a room created while IM answers,
    then IM answering 502 to everything and `joins` joins, which the group dead-letters after
    its reconsume times. Yields (tmp, ns, r, nc, im, failing: the joins' event ids); stops
    all."""
    from standins import ImStandin, TEST_SECRET
    tmp, ns = tempfile.mkdtemp(prefix=prefix), new_ns()
    im = ImStandin(tmp).start()
    r = Roomd(bus_cfg(tmp, ns, extra={
        "tencent_im": im.conf(timeout="1s"),
        "rocketmq": {"room_outbox": {"tencent_im_consumer_enabled": True}}}), tmp=tmp)
    r.start(env={"TIM_TEST_SECRET": TEST_SECRET})
    nc = Nats(NATS_PORT)
    try:
        room = room_name()
        ev = Events(r)
        ev.do("/v1/rooms", {"room_id": room, "owner_uid": 1, "title": prefix})
        wait_until(lambda: js_consumer_idle(nc, ns + "hyapp_room_outbox", G_IM), timeout=20)
        im.control(http_status={"api": "*", "status": 502, "count": 100000})
        for k in range(joins):
            ev.do(f"/v1/rooms/{room}/join", {"uid": 5 + k})
        yield tmp, ns, r, nc, im, ev.ids()[1:]
    finally:
        nc.close()
        r.stop()
        im.stop()
        cleanup(ns)


def test_dead_letter_after_reconsume_times():
    with im_dead_letters("bus-dlq-") as (tmp, ns, r, nc, im, failing):
        wait_until(lambda: all_delivered(r), timeout=20)  # room_outbox is not affected
        dlq = wait_until(lambda: (lambda m: m if len(m) == len(failing) else None)(
            js_all(nc, ns + "hyapp_dlq")), timeout=30, what="dead letters")
        for subj, hdrs, data in dlq:
            assert subj == f"{ns}hyapp_dlq.{G_IM}", subj
            assert hdrs["Roomd-Group"] == G_IM
            assert hdrs["Roomd-Deliveries"] == "3", hdrs  # 1 + consumer_max_reconsume_times 2
            assert envelope(data)["event_id"] in failing
            assert hdrs["Roomd-Key"] == envelope(data)["event_id"]
        assert all(v[1] == 0 for v in outbox(r).values())
        # the group marks its inbox row dead after the dead letter's PubAck: a reader that
        # sees the dead letter at once (js_all is one pass) can be ahead of that write
        want = {"done": 1, "dead": 2}
        wait_until(lambda: dict(db_rows(group_db(tmp, G_IM), "SELECT state, COUNT(*) FROM inbox"
                                        " GROUP BY state")) == want, timeout=10,
                   what=f"inbox states {want}")


# ---- 7 ----

def rocket_cfg(tmp, ns):
    return bus_cfg(tmp, ns, extra={
        "rocketmq": {"rocket_launch": {"enabled": True}},
        "room": {"rocket": {"thresholds": [100, 5000], "countdown": "4s"}}})


def ignite(ev, room):
    ev.room(room, members=(1, 5))
    js = ev.gift(room, 1, 100)
    rk = js["room"]["rocket"]
    assert rk["status"] == "ignited", rk
    return rk["launch_at_ms"], rk["rocket_id"], rk["level"]


def launched_at(nc, ns, room):
    """launched_at_ms of the RoomRocketLaunched events of room in the outbox stream."""
    out = []
    for subj, _, data in js_all(nc, ns + "hyapp_room_outbox"):
        env = envelope(data)
        if env["event_type"] == "RoomRocketLaunched" and env["room_id"] == room:
            out.append(pb_fields(env["payload"]).get(3, 0))
    return out


def check_on_time(nc, ns, room, launch_at, what):
    got = wait_until(lambda: launched_at(nc, ns, room), timeout=15, what=f"{what}: launched")
    assert len(got) == 1, got
    late = got[0] - launch_at
    print(f"  {what}: launched {late} ms after launch_at_ms")
    assert 0 <= late <= 1000, f"{what}: {late} ms late"


def test_rocket_wakeup_on_time_and_across_restart():
    tmp, ns = tempfile.mkdtemp(prefix="bus-rocket-"), new_ns()
    r = Roomd(rocket_cfg(tmp, ns), tmp=tmp).start()
    nc = Nats(NATS_PORT)
    try:
        ev = Events(r)
        a = room_name("ra")
        at, _, _ = ignite(ev, a)
        check_on_time(nc, ns, a, at, "running")

        for how in ("SIGTERM", "SIGKILL"):
            b = room_name("rb")
            at, _, _ = ignite(ev, b)
            wait_until(lambda: js_all(nc, ns + "hyapp_room_rocket_launch"), timeout=5)
            r.stop() if how == "SIGTERM" else r.kill()
            time.sleep(0.5)
            r.start()
            check_on_time(nc, ns, b, at, f"restart by {how}")
    finally:
        nc.close()
        r.stop()
        cleanup(ns)


def test_rocket_stale_and_duplicate_wakeups_change_nothing():
    tmp, ns = tempfile.mkdtemp(prefix="bus-stale-"), new_ns()
    r = Roomd(rocket_cfg(tmp, ns), tmp=tmp).start()
    nc = Nats(NATS_PORT)
    try:
        ev = Events(r)
        room = room_name("rs")
        at, rocket_id, level = ignite(ev, room)
        check_on_time(nc, ns, room, at, "first wake-up")
        _, _, snap = r.http("GET", f"/v1/rooms/{room}")
        version = snap["version"]
        wake = lambda rid, cmd: pb_encode([(1, "hyapp"), (2, room), (3, rid), (4, level),  # noqa
                                           (5, at), (6, cmd)])
        subj = f"{ns}hyapp_room_rocket_launch.wakeup"
        # The same wake-up again under a new Msg-Id (past the broker's dedupe window).
        ack = js_publish(nc, subj, wake(rocket_id, "launch-dup-" + RUN), msg_id="dup-" + cid(),
                         headers={"Launch-At": str(at)})
        assert not ack.get("duplicate"), ack
        # A stale one: another rocket of this room, long gone.
        js_publish(nc, subj, wake(rocket_id + "-old", "launch-stale-" + RUN),
                   msg_id="stale-" + cid(), headers={"Launch-At": str(at - 60000)})
        wait_until(lambda: js_consumer_idle(nc, ns + "hyapp_room_rocket_launch", G_ROCKET),
                   timeout=15, what="wake-ups consumed")
        time.sleep(0.5)
        _, _, snap2 = r.http("GET", f"/v1/rooms/{room}")
        assert snap2["version"] == version, (snap2["version"], version)
        assert launched_at(nc, ns, room) and len(launched_at(nc, ns, room)) == 1
        st = db_rows(group_db(tmp, G_ROCKET), "SELECT key, state FROM inbox ORDER BY key")
        assert (f"rocket-hyapp-{room}-{rocket_id}", "done") in st, st
        assert (f"rocket-hyapp-{room}-{rocket_id}-old", "done") in st, st
    finally:
        nc.close()
        r.stop()
        cleanup(ns)


# ---- 8 ----

def node_state(r, sink="bus"):
    """(readyz status word, its sinks check, roomd_outbox_sink_circuit_open{sink})."""
    st, _, js = r.admin("GET", "/readyz")
    assert st == 200, (st, js)  # the broker down is never 503
    circ = metrics(r).get(f'roomd_outbox_sink_circuit_open{{sink="{sink}"}}')
    return js["status"], js.get("checks", {}).get("sinks"), circ


def test_circuit_closes_without_traffic():
    tmp, ns = tempfile.mkdtemp(prefix="bus-probe-"), new_ns()
    srv = NatsServer(tmp).start()
    db = os.path.join(tmp, "roomd.db")

    def node(name, url, poll):
        d = os.path.join(tmp, name)
        os.makedirs(d)
        return Roomd(bus_cfg(d, ns, url=url, extra={
            "app": {"node_id": f"node-{name}"}, "store": {"sqlite": {"path": db}},
            "outbox_worker": {"circuit_failures": 1, "circuit_probe_every": "300ms",
                              "poll_interval": poll}}), tmp=d)
    # a: its own broker (stopped below), claims often; b: the shared broker, on the
    # same store, claims seldom. While a's sinks do not answer (the bus circuit open,
    # the rocket sink on the same connection) a makes no claims, so b gets the rows a
    # handed back instead of a claiming them again and again.
    a, b = node("a", srv.url(), "200ms").start(), node("b", SHARED, "1s").start()
    try:
        ok(a.post("/v1/rooms", {"command_id": cid(), "room_id": room_name(), "owner_uid": 1,
                                "title": "probe"}))
        wait_until(lambda: all_delivered(a), timeout=15, what="delivered, broker up")
        claimed = metrics(a)["roomd_outbox_claimed_rows_total"]
        srv.stop()
        for _ in range(3):  # a's hand-off fails (its circuit opens); b delivers them
            ok(a.post("/v1/rooms", {"command_id": cid(), "room_id": room_name(),
                                    "owner_uid": 1, "title": "probe"}))
        wait_until(lambda: all_delivered(a), timeout=30, what="b delivered a's rows")
        m = metrics(a)
        assert m["roomd_outbox_claimed_rows_total"] == claimed, (claimed, m)
        assert m["roomd_outbox_claims_paused_total"] > 0, m
        # /readyz is a cache refreshed by a ticker: wait for its look at the open circuit
        wait_until(lambda: (lambda w, si, c: c == 1 and "bus: circuit open" in si)(
            *node_state(a)), timeout=10, what="a's bus circuit open")
        # the outage goes on: degraded at every look, never "ready" in between
        seen = set()
        end = time.time() + 3
        while time.time() < end:
            word, sinks, circ = node_state(a)
            seen.add((word, circ))
            assert word == "degraded" and circ == 1 and "bus: circuit open" in sinks, \
                (word, sinks, circ)
            time.sleep(0.2)
        # a has no rows for the bus; the broker returns: its prober closes the circuit
        t0 = time.time()
        srv.start()
        wait_until(lambda: node_state(a) == ("ready", "ok", 0), timeout=15, step=0.1,
                   what="a ready again without traffic")
        print(f"# a ready {time.time() - t0:.2f}s after its broker restarted "
              f"(circuit_probe_every 300ms); while down: {sorted(seen)}")
        text = "\n".join(a.log_lines())
        assert "circuit closed" in text, "no 'circuit closed' log line"
    finally:
        a.stop()
        b.stop()
        srv.stop()
        cleanup(ns)


# ---- 9 ----

def test_jetstream_unavailable_is_an_outage():
    tmp, ns = tempfile.mkdtemp(prefix="bus-nojs-"), new_ns()
    srv = NatsServer(tmp).start(js=False)  # connected, but nobody answers the JetStream API
    r = Roomd(bus_cfg(tmp, ns, url=srv.url(), extra={"outbox_worker": {
        "max_retry_count": 3, "initial_backoff": "100ms", "max_backoff": "200ms",
        "circuit_failures": 2, "circuit_probe_every": "300ms"}}), tmp=tmp).start()
    try:
        ev = standard_commands(r, room_name())
        wait_until(lambda: (lambda o: o if o and all(v[3] for v in o.values()) else None)(
            outbox(r)), timeout=15, what="rows tried")
        time.sleep(2.0)  # > max_retry_count x max_backoff: counted attempts would fail them
        rows = outbox(r)
        assert all(v[0] in ("retryable", "delivering") and v[1] == 0 for v in rows.values()), \
            rows
        # the broker's "No Responders" reached roomd, and no call was counted as an answer
        assert any("jerr 10076" in line for line in r.log_lines()), "no No Responders seen"
        m = metrics(r)
        assert m['roomd_outbox_attempts_total{sink="bus",outcome="retry"}'] == 0, m
        assert m['roomd_outbox_attempts_total{sink="bus",outcome="unavailable"}'] >= 2, m
        word, sinks, circ = node_state(r)
        assert word == "degraded" and circ == 1, (word, sinks, circ)
        srv.stop()
        srv.start(js=True)  # JetStream back
        delivered_once(r, srv, ns, ev, "delivered after JetStream")
        assert all(v[1] == 0 for v in outbox(r).values()), outbox(r)
    finally:
        r.stop()
        srv.stop()


# ---- 10 ----

def test_inbox_purged_unsettled_counted():
    tmp, ns = tempfile.mkdtemp(prefix="bus-purge-"), new_ns()
    cfg = bus_cfg(tmp, ns, extra={"rocketmq": {"room_outbox": {"activity_consumer_enabled": True}}})
    r = Roomd(cfg, tmp=tmp).start()
    try:
        db = group_db(tmp, G_ACT)
        wait_until(lambda: os.path.exists(db), timeout=10, what="the activity group's inbox")
        m = metrics(r)
        assert m[f'roomd_consumer_inbox_purged_unsettled_total{{group="{G_ACT}"}}'] == 0, m
        r.stop()
        con = sqlite3.connect(db, timeout=10)
        with con:  # two keys received long ago and never settled, one settled
            con.executemany("INSERT INTO inbox(key, state, updated_ms) VALUES (?, ?, 1)",
                            [("old-1", "received"), ("old-2", "received"), ("old-3", "done")])
        con.close()
        r.start()  # the group purges at its start
        wait_until(lambda: metrics(r).get(
            f'roomd_consumer_inbox_purged_unsettled_total{{group="{G_ACT}"}}') == 2,
            timeout=15, what="the purged unsettled keys counted")
        assert db_rows(db, "SELECT count(*) FROM inbox WHERE key LIKE 'old-%'") == [(0,)]
    finally:
        r.stop()
        cleanup(ns)


if __name__ == "__main__":
    need("127.0.0.1", NATS_PORT, "nats-server")
    run([test_mq_every_event_once, test_dual_log_sink_and_stream,
         test_broker_down_commands_succeed_then_published, test_consumer_group_down_backlog,
         test_three_groups_and_forced_redelivery, test_dead_letter_after_reconsume_times,
         test_rocket_wakeup_on_time_and_across_restart,
         test_rocket_stale_and_duplicate_wakeups_change_nothing,
         test_circuit_closes_without_traffic, test_jetstream_unavailable_is_an_outage,
         test_inbox_purged_unsettled_counted])
