# SPDX-License-Identifier: Apache-2.0
"""test_create_limit.py: room.max_creates_per_minute across nodes (the CreateRoom rate limit
counts in Redis when redis.enabled; docs/http.md).

1. Two roomd processes sharing the suite's redis-server (each its own SQLite store): one
   owner's creates are refused (429 rate_limited, Retry-After) once the creates summed over
   both reach the limit; another owner, and the same owner in another app, count apart; the
   count is the Redis key "<key_prefix>create_limit:<app>:<owner>:<minute>".
2. Redis (a private redis-server) stopped: creates still succeed, counted in the process
   (refused at the limit there), roomd_create_limit_fallback_total grows; Redis back:
   counting in Redis again.
"""
import os
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(__file__))
import http_util as hu  # noqa: E402
from roomd_test import Roomd, env_port, need, redis_cli, run, start_redis, wait_until  # noqa: E402
from standins import free_port  # noqa: E402

REDIS_PORT = env_port("ROOMD_REDIS_PORT", 6379)
LIMIT = 4


def node(port, prefix, limit=LIMIT):
    return Roomd({"room": {"max_creates_per_minute": limit},
                  "redis": {"enabled": True, "addr": f"127.0.0.1:{port}", "key_prefix": prefix,
                            "command_timeout": "300ms", "connect_timeout": "300ms"}})


def inside_one_minute(need_s):
    """Waits until at least need_s seconds are left in this wall-clock minute (the limit's
    window), so that a test's creates all count in one window."""
    left = 60 - time.time() % 60
    if left < need_s:
        time.sleep(left + 0.2)


def created(res):
    st, _, js = res
    assert st == 201, (st, js)


def refused(res):
    st, hd, js = res
    assert st == 429 and js["error"]["code"] == "rate_limited", (st, js)
    assert 1 <= int(hd["Retry-After"]) <= 60, hd


def test_limit_summed_over_two_nodes():
    need("127.0.0.1", REDIS_PORT, "redis-server (scripts/servers.sh)")
    prefix = f"t{uuid.uuid4().hex[:8]}:"
    a, b = node(REDIS_PORT, prefix).start(), node(REDIS_PORT, prefix).start()
    try:
        inside_one_minute(10)
        window = int(time.time() // 60)
        for i in range(LIMIT):  # a, b, a, b: the limit summed over both nodes
            created(hu.create((a, b)[i % 2], hu.room_name("cl"), owner=71))
        refused(hu.create(a, hu.room_name("cl"), owner=71))
        refused(hu.create(b, hu.room_name("cl"), owner=71))
        created(hu.create(b, hu.room_name("cl"), owner=72))  # another owner
        created(hu.create(a, hu.room_name("cl"), owner=71, app="other"))  # another app
        assert redis_cli(REDIS_PORT, "GET", f"{prefix}create_limit:hyapp:71:{window}") == \
            str(LIMIT + 2)  # the refused ones are counted too
        ttl = int(redis_cli(REDIS_PORT, "PTTL", f"{prefix}create_limit:hyapp:71:{window}"))
        assert 60000 < ttl <= 120000, ttl
        for rd in (a, b):
            m = hu.metrics(rd)
            assert m["roomd_create_limit_fallback_total"] == 0, m
    finally:
        a.stop()
        b.stop()
        keys = redis_cli(REDIS_PORT, "--scan", "--pattern", prefix + "*") or ""
        for k in keys.split():
            redis_cli(REDIS_PORT, "DEL", k)


def test_redis_down_counts_in_the_process():
    port, d = free_port(), tempfile.mkdtemp(prefix="cl-redis-")
    srv = start_redis(port, d)
    rd = node(port, "cl:", limit=2).start()
    try:
        inside_one_minute(10)
        created(hu.create(rd, hu.room_name("cd"), owner=81))  # counted in Redis
        assert redis_cli(port, "GET", f"cl:create_limit:hyapp:81:{int(time.time() // 60)}") \
            == "1"
        srv.terminate()
        srv.wait(10)
        # Redis down: a create that does not need it still succeeds, counted here (up to 2)
        created(hu.create(rd, hu.room_name("cd"), owner=81))
        created(hu.create(rd, hu.room_name("cd"), owner=81))
        refused(hu.create(rd, hu.room_name("cd"), owner=81))
        created(hu.create(rd, hu.room_name("cd"), owner=82))
        assert hu.metrics(rd)["roomd_create_limit_fallback_total"] == 4
        assert any("Redis does not answer" in line for line in rd.log_lines())
        # back (empty: no persistence): counted in Redis again
        srv = start_redis(port, d)
        owners = iter(range(1000, 2000))

        def counted_in_redis():
            o = next(owners)
            created(hu.create(rd, hu.room_name("cd"), owner=o))
            return redis_cli(port, "GET", f"cl:create_limit:hyapp:{o}:{int(time.time() // 60)}")
        wait_until(counted_in_redis, timeout=10, what="counting in Redis again")
        key = f"cl:create_limit:hyapp:81:{int(time.time() // 60)}"
        created(hu.create(rd, hu.room_name("cd"), owner=81))
        created(hu.create(rd, hu.room_name("cd"), owner=81))
        refused(hu.create(rd, hu.room_name("cd"), owner=81))
        assert redis_cli(port, "GET", key) == "3"
    finally:
        rd.stop()
        srv.terminate()
        srv.wait(10)


if __name__ == "__main__":
    run([test_limit_summed_over_two_nodes, test_redis_down_counts_in_the_process])
