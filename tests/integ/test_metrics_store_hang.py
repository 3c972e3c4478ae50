# SPDX-License-Identifier: Apache-2.0
"""test_metrics_store_hang: /metrics never waits on the store (docs/metrics.md).

roomd on a private mariadbd (test_mysql_procs.PrivateMariadb: stopping the suite's server would
stall the other tests). With rows in the outbox, mariadbd is SIGSTOPped: the scrapes still
answer within 100 ms (the median; none near the 2 s read timeout a store query would wait), from
the cache the readiness ticker fills; the figures' age
(roomd_outbox_store_figures_age_seconds) grows and roomd_dependency_up{dependency="store"} goes
0 once the ticker's check fails (store.mysql.read_timeout). After SIGCONT the store is up again
and the age small."""
import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from roomd_test import Roomd, listing, run, wait_until  # noqa: E402
from test_mysql_procs import PrivateMariadb, mysql  # noqa: E402
import http_util as hu  # noqa: E402

AGE = 'roomd_outbox_store_figures_age_seconds{scope="store"}'
UP = 'roomd_dependency_up{dependency="store"}'


def timed_metrics(rd):
    t0 = time.monotonic()
    m = hu.metrics(rd)
    return m, time.monotonic() - t0


def test_metrics_answer_while_the_store_is_stopped():
    if listing():
        return
    tmp = tempfile.mkdtemp(prefix="metrics-hang-")
    srv = PrivateMariadb(tmp)
    srv.start()
    rd = None
    try:
        mysql(srv.port, "CREATE DATABASE roomd CHARACTER SET utf8mb4")
        rd = Roomd({"store": {"driver": "mysql", "mysql": {
            "host": "127.0.0.1", "port": srv.port, "user": "root", "password": "",
            "database": "roomd", "pool_size": 4, "connect_timeout": "1s",
            "read_timeout": "2s", "write_timeout": "2s"}}}, tmp=tmp)
        rd.start()
        st, _, js = hu.create(rd, hu.room_name("hang"))
        assert st == 201, (st, js)
        wait_until(lambda: hu.metrics(rd).get(UP) == 1.0 and AGE in hu.metrics(rd), timeout=20,
                   what="the store figures")
        os.kill(srv.proc.pid, signal.SIGSTOP)
        try:
            took_s, seen_down = [], False
            end = time.monotonic() + 8
            while time.monotonic() < end:
                m, took = timed_metrics(rd)
                took_s.append(round(took, 3))
                seen_down = seen_down or m.get(UP) == 0.0
                time.sleep(0.25)
            # a scrape that waited on the store would take the read timeout (2 s); on a
            # loaded machine one scrape may lose the CPU for a while, so: the median within
            # 100 ms, none near the read timeout
            took_s.sort()
            assert took_s[len(took_s) // 2] < 0.1 and took_s[-1] < 1.0, \
                f"scrape times while the store was stopped: {took_s}"
            assert seen_down, "the store went down in roomd_dependency_up"
            assert m[AGE] > 1.0, m[AGE]
        finally:
            os.kill(srv.proc.pid, signal.SIGCONT)
        wait_until(lambda: (lambda m: m.get(UP) == 1.0 and m[AGE] < 3)(hu.metrics(rd)),
                   timeout=30, what="the store up again")
    finally:
        if rd is not None:
            rd.stop()
        srv.stop()


if __name__ == "__main__":
    run([test_metrics_answer_while_the_store_is_stopped])
