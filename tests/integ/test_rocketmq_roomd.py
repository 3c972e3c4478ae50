# SPDX-License-Identifier: Apache-2.0
"""test_rocketmq_roomd: roomd's mq sink on the rocketmq driver, a real roomd process against
the RocketMQ stand-in (tests/standins/rocketmq_standin.py, itself checked with ali-ons in
test_rocketmq_standin), never against a real broker.

1. mq: every event of the seed's standard commands is one message on <ns>%hyapp_room_outbox
   (the namespace applied as RocketMQ clients do; the topic created on the first send
   through TBW102's route), KEYS = event_id, TAGS = event_type, body = the envelope; a room's
   events on one queue in room_seq order, rooms spread over the queues; a dead first name
   server is skipped; a restart sends nothing again; ali-ons consumes the same events
   (keys, tags, body decoded as roomd.v1.RoomOutboxEvent). With no name_servers, the name
   server address service of name_server_domain gives them.
2. dual: the log sink and the broker both get every event once.
3. broker down for longer than max_retry_count x max_backoff: commands succeed at once,
   rows stay retryable with retry_count 0 (an outage burns no attempt), none fails; the
   broker comes back: every row delivered, each event once; again across a kill -9 of the
   broker (its data dir kept) with commands meanwhile.
4. ACL: the right keys deliver (every request signed); a bad secret_key stops start-up with
   an error naming rocketmq.secret_key (the secret never printed); with the broker down at
   start-up, the first sends fail naming the key and nothing is marked delivered.
5. rocket wake-ups: each ignition is a RocketLaunchWakeup on hyapp_room_rocket_launch
   delivered at launch_at_ms: a timer message on a 5.x broker (ali-ons receives it within
   1 s of launch_at_ms: the broker's timer precision), the longest delay level not later on
   a 4.x one (received before launch_at_ms + 1 s; the consumer waits the rest); roomd's
   rocket-open group launches the rocket within 1 s of launch_at_ms either way.
6. --check-config: the seed's rocketmq block (host:port name servers, namespace, keys)
   passes; a URL where a host:port belongs is refused naming rocketmq.name_servers.

Run: python3 tests/integ/test_rocketmq_roomd.py (PYTHONPATH=tests, ROOMD_BUILD_DIR=build)"""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "standins"))
from roomd_test import ROOMD, Roomd, listing, merge, run, wait_until  # noqa: E402
from bus_util import envelope  # noqa: E402
from http_util import metrics, room_name  # noqa: E402
from standins import free_port  # noqa: E402
from rocketmq_util import RocketStandin, alions_available, alions_consume  # noqa: E402
from bus_util import pb_fields  # noqa: E402
from test_bus_roomd import Events, all_delivered, ignite, outbox, standard_commands  # noqa: E402

TOPIC = "hyapp_room_outbox"


def rmq_cfg(b, ns="", extra=None, dead_first=False):
    servers = ([f"127.0.0.1:{free_port()}"] if dead_first else []) + b.name_servers
    cfg = {
        "rocketmq": {"enabled": True, "name_servers": servers, "namespace": ns,
                     "send_timeout": "1s", "retry": 1,
                     "room_outbox": {"enabled": True}, "rocket_launch": {"enabled": False}},
        "outbox_worker": {"publish_mode": "mq", "max_retry_count": 30,
                          "initial_backoff": "100ms", "max_backoff": "500ms"},
    }
    return merge(cfg, extra or {})


def wire(ns, name):
    return f"{ns}%{name}" if ns else name


def messages_by_key(b, topic):
    out = {}
    for m in b.stats([topic])["messages"][topic]:
        k = m["props"]["KEYS"]
        assert k not in out, f"event {k} twice in {topic}"
        out[k] = m
    return out


# ---- 1 ----

def test_mq_every_event_once():
    with tempfile.TemporaryDirectory() as tmp:
        ns = "t1"
        b = RocketStandin(tmp).start()
        r = Roomd(rmq_cfg(b, ns, dead_first=True), tmp=tmp)
        try:
            r.start()
            rooms = [room_name() for _ in range(6)]
            ev = standard_commands(r, rooms[0])
            for room in rooms[1:]:
                ev.ev += Events(r).room(room, members=(1, 5)).ev
            rows = wait_until(lambda: all_delivered(r), timeout=30, what="all rows delivered")
            assert set(rows) == set(ev.ids())
            assert all(v[2] & 8 for v in rows.values()), rows  # SINK_BIT_BUS done
            got = messages_by_key(b, wire(ns, TOPIC))
            assert set(got) == set(ev.ids()), (sorted(got), sorted(ev.ids()))
            by_room = {}
            for eid, etype in ev.ev:
                m = got[eid]
                env = envelope(m["body"])
                assert m["props"]["TAGS"] == etype and env["event_type"] == etype, m
                assert env["event_id"] == eid and env["app_code"] == "hyapp", env
                assert m["props"].get("UNIQ_KEY"), m
                by_room.setdefault(env["room_id"], []).append(
                    (m["queueId"], m["queueOffset"], env["room_seq"]))
            for room, ms in by_room.items():
                assert len({q for q, _, _ in ms}) == 1, (room, ms)  # one queue per room
                ms.sort(key=lambda x: x[1])
                seqs = [s for _, _, s in ms]
                assert seqs == sorted(seqs), (room, ms)  # commit order on the queue
            assert len({ms[0][0] for ms in by_room.values()}) > 1, by_room  # rooms spread
            mt = metrics(r)
            assert mt['roomd_broker_up{driver="rocketmq"}'] == 1, mt
            assert mt['roomd_dependency_up{dependency="broker"}'] == 1, mt
            assert mt['roomd_broker_sends_total{driver="rocketmq",result="ok"}'] >= len(rows)
            # ali-ons, an independent client, consumes the same events
            rc, dl, err = alions_consume(b.name_servers, "G_interop", TOPIC, "*",
                                         len(ev.ids()), 30, namespace=ns)
            assert rc == 0, err
            seen = {d["keys"]: d for d in dl}
            assert set(seen) == set(ev.ids()), (sorted(seen), err[-2000:])
            for eid, etype in ev.ev:
                assert seen[eid]["tags"] == etype
                assert envelope(seen[eid]["body"])["event_id"] == eid
            # a restart finds nothing to send again
            r.stop()
            r.start()
            time.sleep(1.0)
            assert len(b.stats([wire(ns, TOPIC)])["messages"][wire(ns, TOPIC)]) == len(ev.ids())
        finally:
            r.stop()
            b.stop()


def test_name_server_domain():
    """No name_servers: the address service of name_server_domain gives them."""
    with tempfile.TemporaryDirectory() as tmp:
        b = RocketStandin(tmp, topics=[TOPIC], http=True).start()
        cfg = rmq_cfg(b)
        cfg["rocketmq"]["name_servers"] = []
        cfg["rocketmq"]["name_server_domain"] = f"127.0.0.1:{b.http_port}"
        r = Roomd(cfg, tmp=tmp)
        try:
            r.start()
            ev = standard_commands(r, room_name())
            wait_until(lambda: all_delivered(r), timeout=30, what="delivered via the domain")
            assert set(messages_by_key(b, TOPIC)) == set(ev.ids())
        finally:
            r.stop()
            b.stop()


# ---- 2 ----

def test_dual_log_sink_and_broker():
    with tempfile.TemporaryDirectory() as tmp:
        b = RocketStandin(tmp, topics=[TOPIC]).start()
        r = Roomd(rmq_cfg(b, extra={"outbox_worker": {"publish_mode": "dual"}}), tmp=tmp)
        try:
            r.start()
            ev = standard_commands(r, room_name())
            rows = wait_until(lambda: all_delivered(r), timeout=30, what="all rows delivered")
            assert all(v[2] & 9 == 9 for v in rows.values()), rows  # log + bus sinks done
            assert sorted(e["event_id"] for e in r.events()) == sorted(ev.ids())
            assert set(messages_by_key(b, TOPIC)) == set(ev.ids())
        finally:
            r.stop()
            b.stop()


# ---- 3 ----

def test_broker_down_commands_succeed_then_sent():
    with tempfile.TemporaryDirectory() as tmp:
        b = RocketStandin(tmp, topics=[TOPIC])  # not started: the broker is down
        r = Roomd(rmq_cfg(b, extra={"outbox_worker": {
            "max_retry_count": 3, "initial_backoff": "100ms", "max_backoff": "200ms",
            "circuit_failures": 2, "circuit_probe_every": "300ms"}}), tmp=tmp).start()
        try:
            t0 = time.time()
            ev = standard_commands(r, room_name())
            per_cmd = (time.time() - t0) / 8
            assert per_cmd < 0.5, f"commands waited for the broker: {per_cmd:.3f}s each"
            wait_until(lambda: (lambda o: o if o and all(v[3] for v in o.values()) else None)(
                outbox(r)), timeout=45, what="rows retried")
            time.sleep(2.0)  # > max_retry_count x max_backoff = 0.6 s
            rows = outbox(r)
            assert all(v[0] in ("retryable", "delivering") and v[1] == 0
                       for v in rows.values()), rows
            assert any("bus" in (v[3] or "") for v in rows.values()), rows
            st, _, health = r.http("GET", "/readyz")
            assert "broker" in str(health), health
            mt = metrics(r)
            assert mt['roomd_broker_up{driver="rocketmq"}'] == 0, mt
            assert mt['roomd_dependency_up{dependency="broker"}'] == 0, mt  # the alert's input
            assert mt['roomd_broker_sends_total{driver="rocketmq",result="unavailable"}'] > 0, mt
            b.start()
            wait_until(lambda: all_delivered(r), timeout=30, what="delivered after the broker")
            assert set(messages_by_key(b, TOPIC)) == set(ev.ids())
            assert all(v[1] == 0 for v in outbox(r).values())
            # kill -9 of the broker (its data dir kept): roomd reconnects, sends the rest
            b.kill()
            ev2 = standard_commands(r, room_name())
            time.sleep(0.5)
            b.start()
            wait_until(lambda: all_delivered(r), timeout=30, what="delivered after a restart")
            assert set(messages_by_key(b, TOPIC)) == set(ev.ids()) | set(ev2.ids())
            assert metrics(r)['roomd_broker_reconnects_total{driver="rocketmq"}'] >= 1
        finally:
            r.stop()
            b.stop()


# ---- 4 ----

def test_acl_keys():
    with tempfile.TemporaryDirectory() as tmp:
        b = RocketStandin(tmp, topics=[TOPIC], acl="AKroomd:SKroomd-right").start()
        good = {"rocketmq": {"access_key": "AKroomd", "secret_key": "SKroomd-right"}}
        r = Roomd(rmq_cfg(b, extra=good), tmp=tmp)
        try:
            r.start()
            ev = standard_commands(r, room_name())
            wait_until(lambda: all_delivered(r), timeout=30, what="delivered, signed")
            assert set(messages_by_key(b, TOPIC)) == set(ev.ids())
        finally:
            r.stop()
        # a bad secret_key with the broker up: start-up fails naming the key
        bad = {"rocketmq": {"access_key": "AKroomd", "secret_key": "SKroomd-WRONG"}}
        os.makedirs(os.path.join(tmp, "bad"))
        r2 = Roomd(rmq_cfg(b, extra=bad), tmp=os.path.join(tmp, "bad"))
        r2.start(wait=False)
        assert r2.proc.wait(20) != 0
        text = r2.stderr_text() + open(r2.log_path).read()
        assert "rocketmq.secret_key" in text, text
        assert "SKroomd-WRONG" not in text and "SKroomd-right" not in text, text
        # the broker down at start-up: roomd starts; its sends fail naming the key, nothing
        # is marked delivered, no attempt is burnt
        b.stop()
        tmp3 = os.path.join(tmp, "bad-later")
        os.makedirs(tmp3)
        r3 = Roomd(rmq_cfg(b, extra=bad), tmp=tmp3)
        try:
            r3.start()
            b.start()
            before = len(b.stats([TOPIC])["messages"][TOPIC])
            standard_commands(r3, room_name())
            # the room's first event names the key; its later ones are held behind it
            wait_until(lambda: any("rocketmq.secret_key" in (v[3] or "")
                                   for v in outbox(r3).values()),
                       timeout=20, what="sends refused naming the key")
            time.sleep(1.0)
            rows = outbox(r3)
            assert all(v[0] != "delivered" and v[1] == 0 for v in rows.values()), rows
            assert len(b.stats([TOPIC])["messages"][TOPIC]) == before
            log = open(r3.log_path).read()
            assert "SKroomd-WRONG" not in log
        finally:
            r3.stop()
            b.stop()


# ---- 5 ----

ROCKET = "hyapp_room_rocket_launch"


def _rocket_case(tmp, v4):
    b = RocketStandin(tmp, topics=[TOPIC, ROCKET], v4=v4,
                      levels="1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h").start()
    cfg = rmq_cfg(b, extra={"rocketmq": {"rocket_launch": {"enabled": True}},
                            "room": {"rocket": {"thresholds": [100, 5000], "countdown": "4s"}}})
    r = Roomd(cfg, tmp=tmp)
    try:
        r.start()
        room = room_name()
        launch_at, rocket_id, level = ignite(Events(r), room)
        rc, got, err = alions_consume(b.name_servers, "G_rocket_check", ROCKET, "wakeup", 1, 15)
        assert rc == 0 and len(got) == 1, (got, err[-2000:])
        d = got[0]
        wk = pb_fields(d["body"])
        assert wk[2].decode() == room and wk[3].decode() == rocket_id and wk[5] == launch_at, wk
        assert d["keys"] == f"rocket-hyapp-{room}-{rocket_id}", d
        early = launch_at - d["at"]
        print(f"  v4={v4}: the wake-up came {early} ms before launch_at_ms")
        sched = b.stats(["SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer"])["messages"]
        produced = {k: [m for m in v if m["props"].get("REAL_TOPIC") == ROCKET]
                    for k, v in sched.items()}  # not the group's own send-backs (%RETRY%)
        if v4:  # the longest delay level not later: 4 s -> level 2 (5 s) is later, so 1 (1 s)
            assert [m["props"]["DELAY"] for m in produced["SCHEDULE_TOPIC_XXXX"]] == ["1"], sched
            assert 0 <= early <= 3500, early
        else:   # a timer message, rounded down to the broker's 1 s precision
            assert len(produced["rmq_sys_wheel_timer"]) == 1, sched
            assert not produced["SCHEDULE_TOPIC_XXXX"], sched
            assert -1000 <= early <= 1000, early
        # roomd's rocket-open group (on this driver too) launches it on time
        def launched():
            return [envelope(m["body"]) for m in messages_by_key(b, TOPIC).values()
                    if m["props"]["TAGS"] == "RoomRocketLaunched"]
        got = wait_until(launched, timeout=15, what="launched")
        assert len(got) == 1 and got[0]["room_id"] == room, got
        late = pb_fields(got[0]["payload"]).get(3, 0) - launch_at
        assert 0 <= late <= 1000, late
    finally:
        r.stop()
        b.stop()


def test_rocket_wakeups_delayed():
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "v5"))
        os.makedirs(os.path.join(tmp, "v4"))
        _rocket_case(os.path.join(tmp, "v5"), v4=False)
        _rocket_case(os.path.join(tmp, "v4"), v4=True)


# ---- 6 ----

SEED_BLOCK = """
rocketmq:
  enabled: true
  name_servers: ["10.0.0.21:9876", "10.0.0.22:9876"]
  name_server_domain: ""
  access_key: "ak-example"
  secret_key: "sk-example"
  namespace: "rocketmq-xxx|namespace_room"
  send_timeout: "3s"
  retry: 2
  room_outbox:
    enabled: true
    topic: "hyapp_room_outbox"
    producer_group: "hyapp-room-outbox-producer"
    tencent_im_consumer_enabled: false
    tencent_im_consumer_group: "hyapp-room-im-bridge"
    consumer_max_reconsume_times: 16
  rocket_launch:
    enabled: false
    topic: "hyapp_room_rocket_launch"
    producer_group: "hyapp-room-rocket-open-producer"
    consumer_group: "hyapp-room-rocket-open"
    consumer_max_reconsume_times: 16
outbox_worker:
  enabled: true
  publish_mode: "mq"
  poll_interval: "1s"
  batch_size: 100
  publish_timeout: "3s"
  retry_strategy: "exponential_backoff"
  max_retry_count: 10
  initial_backoff: "5s"
  max_backoff: "5m"
"""


def test_seed_config_block_checks():
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "var"))

        def check(text):
            path = os.path.join(tmp, "c.yaml")
            with open(path, "w") as f:
                f.write(text)
            p = subprocess.run([ROOMD, "--check-config", path], capture_output=True, text=True,
                               timeout=20, cwd=tmp)
            return p.returncode, p.stdout + p.stderr
        rc, out = check(SEED_BLOCK)
        assert rc == 0 and "ok" in out, out
        assert "sk-example" not in out
        rc, out = check(SEED_BLOCK.replace('"10.0.0.22:9876"', '"http://x/y"'))
        assert rc == 1 and "rocketmq.name_servers" in out, out
        rc, out = check(SEED_BLOCK.replace("  retry: 2", "  retry: 2\n  driver: kafka"))
        assert rc == 1 and "rocketmq.driver" in out, out


if __name__ == "__main__":
    if not listing() and not alions_available():
        print("FAIL: ali-ons not installed in tests/standins (npm ci there)")
        sys.exit(1)
    run([test_mq_every_event_once, test_name_server_domain, test_dual_log_sink_and_broker,
         test_broker_down_commands_succeed_then_sent, test_acl_keys, test_rocket_wakeups_delayed,
         test_seed_config_block_checks])
