# SPDX-License-Identifier: Apache-2.0
"""Consumer groups through an IM outage (issue 29, docs/bus.md "Outages"): two roomd nodes of the
production shape (cluster_util: MariaDB, Redis, a 3-server nats-server cluster; publish_mode mq,
the IM bridge group in both nodes, its inbox the shared MySQL table consumer_inbox).

1. The IM stand-in is stopped for 30 s while joins go on through both nodes. The test config
   allows consumer_max_reconsume_times 2 with retry delays 200 ms, 400 ms: the outage is ~40
   times longer than every reconsume together. During it both nodes' admin /readyz says
   "degraded" with the consumers check naming IM, and roomd_dependency_up{dependency="im"} is 0.
   IM back: every event is done by the group with 0 failures recorded in the inbox, 0 dead
   letters (metrics, inbox, the DLQ stream), retried{reason="failure"} 0, lag and ack pending 0,
   and /readyz ready again.
2. A poison event while IM answers (HTTP 502 to it, an answer: the event's failure) is
   dead-lettered after max reconsumes (reason max_reconsume), on the DLQ stream, and counted.
"""
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "standins"))
import http_util as hu  # noqa: E402
from bus_util import js_stream_count  # noqa: E402
from cluster_util import MYSQL_PORT, REDIS_PORT, Cluster  # noqa: E402
from roomd_test import listing, need, run, wait_until  # noqa: E402
from standins import ImStandin, TEST_SECRET  # noqa: E402

TMP = tempfile.mkdtemp(prefix="roomd-consumer-outage-")
G = "hyapp-room-im-bridge"
OUTAGE_S = 30


def ok(res, what=""):
    st, _, js = res
    assert st in (200, 201), f"{what}: {st} {js}"
    return js


def m_sum(cl, name):
    """name (a full sample name with labels) summed over the nodes."""
    return sum(hu.metrics(r).get(name, 0) for r in cl.nodes)


def im_gauge(r):
    return hu.metrics(r).get('roomd_dependency_up{dependency="im"}')


def readyz(r):
    st, _, js = r.admin("GET", "/readyz")
    return st, js


def inbox(cl, state):
    return int(cl.mysql(f"SELECT COUNT(*) FROM consumer_inbox WHERE group_name = '{G}'"
                        f" AND state = '{state}'")[0][0])


def all_done(cl):
    n = int(cl.mysql("SELECT COUNT(*) FROM room_outbox")[0][0])
    st = {s for (s,) in cl.mysql("SELECT DISTINCT status FROM room_outbox")}
    return n if st == {"delivered"} and inbox(cl, "done") == n else None


def position_idle(cl):
    """Both nodes report lag 0 and nothing unacknowledged for the group."""
    for r in cl.nodes:
        m = hu.metrics(r)
        if m.get(f'roomd_consumer_lag{{group="{G}"}}') != 0:
            return False
        if m.get(f'roomd_consumer_ack_pending{{group="{G}"}}') != 0:
            return False
        if m.get(f'roomd_consumer_oldest_unacked_age_seconds{{group="{G}"}}') != 0:
            return False
    return True


def dead_letters(cl):
    return sum(m_sum(cl, f'roomd_consumer_dead_letters_total{{group="{G}",reason="{why}"}}')
               for why in ("permanent", "max_reconsume", "undecodable", "no_verdict"))


def outage_then_poison(cl, im):
    rooms = []
    for k in range(2):  # one room owned by each node; CreateRoom calls IM, so before the outage
        room = hu.room_name("out")
        ok(hu.create(cl.nodes[k], room), "create")
        rooms.append(room)
    uid = [100]

    def joins(n):
        for i in range(n):
            uid[0] += 1
            ok(hu.join(cl.nodes[i % 2], rooms[i % 2], uid[0]), "join")
    joins(4)
    wait_until(lambda: all_done(cl), timeout=30, step=0.3, what="the first events done")
    wait_until(lambda: position_idle(cl), timeout=20, step=0.5, what="lag 0 before the outage")
    assert all(im_gauge(r) == 1 for r in cl.nodes), [im_gauge(r) for r in cl.nodes]

    # 1. IM down for OUTAGE_S
    t0 = time.time()
    im.stop()
    joins(10)

    def both_degraded():
        for r in cl.nodes:
            st, js = readyz(r)
            c = (js or {}).get("checks", {}).get("consumers", "")
            if st != 200 or js.get("status") != "degraded" or "im unreachable" not in c:
                return None
            if im_gauge(r) != 0:
                return None
        return True
    wait_until(both_degraded, timeout=20, step=0.3, what="both nodes degraded naming IM")
    st, js = readyz(cl.nodes[0])
    print(f"  during the outage: /readyz {st} {js}")
    time.sleep(OUTAGE_S / 2 - (time.time() - t0) if OUTAGE_S / 2 > time.time() - t0 else 0)
    joins(6)
    assert both_degraded(), [readyz(r) for r in cl.nodes]
    assert inbox(cl, "dead") == 0 and dead_letters(cl) == 0
    left = OUTAGE_S - (time.time() - t0)
    if left > 0:
        time.sleep(left)
    assert both_degraded(), [readyz(r) for r in cl.nodes]
    outage_s = time.time() - t0
    im.start()

    n = wait_until(lambda: all_done(cl), timeout=60, step=0.5,
                   what="every event done by the group after the outage")
    wait_until(lambda: position_idle(cl), timeout=30, step=0.5, what="lag 0 after the outage")
    wait_until(lambda: all(readyz(r)[1].get("status") == "ready" and im_gauge(r) == 1
                           for r in cl.nodes), timeout=20, step=0.3, what="ready again")
    assert inbox(cl, "dead") == 0
    assert dead_letters(cl) == 0
    assert js_stream_count(cl.nc(), cl.ns + "hyapp_dlq") == 0
    fails = int(cl.mysql(f"SELECT COALESCE(SUM(failures), 0) FROM consumer_inbox"
                         f" WHERE group_name = '{G}'")[0][0])
    assert fails == 0, (f"the outage cost {fails} reconsume attempts",
                        cl.mysql(f"SELECT event_id, failures, last_error FROM consumer_inbox"
                                 f" WHERE group_name = '{G}' AND failures > 0"))
    assert m_sum(cl, f'roomd_consumer_retried_total{{group="{G}",reason="failure"}}') == 0
    outages = m_sum(cl, f'roomd_consumer_retried_total{{group="{G}",reason="outage"}}')
    skipped = m_sum(cl, f'roomd_consumer_retried_total{{group="{G}",reason="circuit_open"}}')
    assert outages > 0, "no outage counted"
    assert m_sum(cl, f'roomd_consumer_circuit_opened_total{{group="{G}"}}') >= 1
    handled = m_sum(cl, f'roomd_consumer_handled_total{{group="{G}"}}')
    assert handled >= n, (handled, n)
    print(f"  outage {outage_s:.0f} s (reconsumes allowed: 2 x 200/400 ms): {n} events done, "
          f"{outages:.0f} outage Naks, {skipped:.0f} skipped by the open circuit, 0 failures, "
          f"0 dead letters")

    # 2. a poison event while IM answers: dead-lettered after max reconsumes
    im.control(http_status={"api": "*", "status": 502, "count": 100000})
    uid[0] += 1
    ok(hu.join(cl.nodes[0], rooms[0], uid[0]), "poison join")
    wait_until(lambda: inbox(cl, "dead") == 1, timeout=30, step=0.3, what="the poison dead")
    im.control(reset=True)
    wait_until(lambda: m_sum(cl, f'roomd_consumer_dead_letters_total{{group="{G}",'
                                 f'reason="max_reconsume"}}') == 1, timeout=10, step=0.3,
               what="the dead letter counted")
    assert js_stream_count(cl.nc(), cl.ns + "hyapp_dlq") == 1
    assert m_sum(cl, f'roomd_consumer_retried_total{{group="{G}",reason="failure"}}') == 2
    # a dead letter is acknowledged: the group's position is idle again
    wait_until(lambda: position_idle(cl), timeout=30, step=0.5, what="lag 0 after the poison")


def main():
    if listing():
        run([], fixture="outage")
    need("127.0.0.1", MYSQL_PORT, "mariadbd (scripts/servers.sh)")
    need("127.0.0.1", REDIS_PORT, "redis-server (scripts/servers.sh)")
    os.environ["TIM_TEST_SECRET"] = TEST_SECRET
    im = ImStandin(TMP).start()
    extra = {
        "tencent_im": im.conf(timeout="1s"),
        "rocketmq": {
            "consumer_circuit_failures": 2, "consumer_circuit_probe_every": "500ms",
            "room_outbox": {"consumer_max_reconsume_times": 2,
                            "tencent_im_consumer_enabled": True}},
    }
    cl = Cluster(TMP, nodes=2, extra=extra)
    try:
        cl.start()

        def consumer_outage_costs_no_attempts():
            outage_then_poison(cl, im)
        run([consumer_outage_costs_no_attempts], fixture="outage")
    finally:
        cl.stop()
        im.stop()


if __name__ == "__main__":
    main()
