# SPDX-License-Identifier: Apache-2.0
"""test_sink_gauges: per-sink backlog and age count only the rows that carry the sink
(core/sink_bits.h: the rocket sink carries RoomRocketIgnited only, the wallet's Confirm
RoomGiftSent only).

roomd in direct mode with the IM sink (the IM stand-in) and the rocket wake-up sink (JetStream,
rocketmq.rocket_launch on). With IM answering 502 to everything, joins pile up undelivered by
IM: roomd_outbox_sink_oldest_undelivered_seconds{sink="tim"} grows past 1 s while the rocket
sink's stays 0 (no rocket row at all), and the admin summary counts the joins against tim, none
against rocket. The store-wide figures come with their age
(roomd_outbox_store_figures_age_seconds)."""
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "standins"))
from roomd_test import Roomd, need, run, wait_until  # noqa: E402
from test_bus_roomd import NATS_PORT, bus_cfg, cleanup, new_ns  # noqa: E402
import http_util as hu  # noqa: E402

TIM = 'roomd_outbox_sink_oldest_undelivered_seconds{scope="store",sink="tim"}'
ROCKET = 'roomd_outbox_sink_oldest_undelivered_seconds{scope="store",sink="rocket"}'


def test_rocket_age_stays_zero_during_im_stall():
    need("127.0.0.1", NATS_PORT, "nats-server")
    from standins import ImStandin, TEST_SECRET
    tmp, ns = tempfile.mkdtemp(prefix="sink-gauges-"), new_ns()
    im = ImStandin(tmp).start()
    r = Roomd(bus_cfg(tmp, ns, extra={
        "tencent_im": im.conf(timeout="1s"),
        "rocketmq": {"rocket_launch": {"enabled": True}},
        "outbox_worker": {"publish_mode": "direct", "max_retry_count": 1000,
                          "log_sink": {"enabled": False}}}), tmp=tmp)
    r.start(env={"TIM_TEST_SECRET": TEST_SECRET})
    try:
        room = hu.room_name("gauge")
        st, _, js = hu.create(r, room)
        assert st == 201, (st, js)
        wait_until(lambda: r.admin("GET", "/admin/v1/outbox/summary")[2]["by_status"]
                   ["delivered"] == 1, timeout=20, what="the create delivered")
        im.control(http_status={"api": "*", "status": 502, "count": 100000})
        for uid in (5, 6, 7):
            st, _, js = hu.join(r, room, uid)
            assert st == 200, (st, js)
        m = wait_until(lambda: (lambda m: m if m.get(TIM, 0) > 1.0 else None)(hu.metrics(r)),
                       timeout=20, what="the IM sink's age past 1 s")
        assert m[ROCKET] == 0.0, {k: v for k, v in m.items() if "sink_oldest" in k}
        assert 0 <= m['roomd_outbox_store_figures_age_seconds{scope="store"}'] < 5, m
        st, _, s = r.admin("GET", "/admin/v1/outbox/summary")
        assert st == 200, (st, s)
        assert s["sinks"]["tim"]["undelivered"] == 3, s
        assert s["sinks"]["rocket"]["undelivered"] == 0 and s["sinks"]["rocket"]["failed"] == 0, s
        assert s["sinks"]["rocket"]["oldest_undelivered_s"] == 0, s
        assert s["sinks"]["tim"]["oldest_failed_s"] == 0, s  # nothing failed: retried
        time.sleep(0.5)
        assert hu.metrics(r)[ROCKET] == 0.0
    finally:
        r.stop()
        im.stop()
        cleanup(ns)


if __name__ == "__main__":
    run([test_rocket_age_stays_zero_during_im_stall])
