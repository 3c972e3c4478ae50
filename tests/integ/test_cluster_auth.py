# SPDX-License-Identifier: Apache-2.0
"""Rockets on time across nodes under auth.mode jwt (issue 11, docs/auth.md "Between nodes").

Two roomd nodes of the cluster_util topology (Redis lease, cluster.forward, mq rocket wake-ups)
with auth.mode jwt and an admin token; each node has its own rocket-open group, so each handles
every wake-up and forwards those of the rooms the other node owns to the owner's admin listener
(admin.advertise_addr, from the lease) with the admin token. Every wake-up is answered 200 on
both nodes (none held as "not launched yet": before, the owner's public listener answered a
forwarded launch 503 under jwt), and every rocket launches within 1 s of launch_at_ms.
"""
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
import http_util as hu  # noqa: E402
import jwt_util as jw  # noqa: E402
from cluster_util import MYSQL_PORT, REDIS_PORT, Cluster  # noqa: E402
from roomd_test import listing, need, run, wait_until  # noqa: E402

TMP = tempfile.mkdtemp(prefix="roomd-cluster-auth-")
SECRET = "cluster-secret-" + os.urandom(16).hex()
ADMIN = "cluster-admin-" + os.urandom(12).hex()
ROCKETS = 12

# Roomd.start passes the test's environment on: the secrets the configs name
os.environ["ROOMD_TEST_JWT"] = SECRET
os.environ["ROOMD_TEST_ADMIN"] = ADMIN
AUTH = {"auth": {"mode": "jwt", "jwt": {"hs256_secret_env": "ROOMD_TEST_JWT"}},
        "admin": {"token_env": "ROOMD_TEST_ADMIN"}}


def with_service_token(rd):
    """Makes rd's public requests carry a service token (the gateway's)."""
    plain = rd.http
    token = jw.bearer(jw.hs256(SECRET, jw.claims(1, scope="room:service", ttl=3600)))

    def http(method, path, body=None, headers=None, **kw):
        h = dict(token)
        h.update(headers or {})
        return plain(method, path, body, headers=h, **kw)

    rd.http = http
    rd.admin_token = ADMIN


def ok(res, what):
    st, _, js = res
    assert st in (200, 201), f"{what}: {st} {js}"  # CreateRoom: 201
    return js


def ignite(rd, room):
    """Ignites room's rocket (threshold 100) on rd; returns launch_at_ms."""
    ok(hu.join(rd, room, 5), "join")
    ok(hu.join(rd, room, 6), "join")
    ok(hu.put_gift(rd, "rose", 10), "the catalog's rose")  # jwt: room.gift_catalog required
    rk = ok(hu.gift(rd, room, 5, 6, count=10, unit_price=10), "gift")["room"]["rocket"]
    assert rk["status"] == "ignited", rk
    return rk["launch_at_ms"]


def launches(cl):
    rows = cl.mysql("SELECT room_id, created_at_ms FROM room_command_log"
                    " WHERE command_type = 'LaunchRocket'")
    return {r: int(t) for r, t in rows}


def forwarded_ok(cl):
    return sum(hu.metrics(rd).get('roomd_forward_total{result="ok"}', 0) for rd in cl.nodes)


def handled(rd, rooms):
    """{room: status} of the wake-ups rd's rocket-open group handled (its log)."""
    out = {}
    for line in rd.log_lines():
        if "rocket wake-up handled" in line:
            f = json.loads(line)  # one JSON line per record, the k=v fields as its keys
            if f.get("room") in rooms:
                out[f["room"]] = int(f["status"])
    return out


def rockets_forwarded_to_admin_on_time(cl):
    rooms = {}
    for k in range(ROCKETS):
        rd = cl.nodes[k % 2]
        room = hu.room_name("rka")
        ok(hu.create(rd, room), "create")  # the creating node owns it
        rooms[room] = rd
    assert {cl.owner_of(r) for r in rooms} == {0, 1}
    before = forwarded_ok(cl)
    due = {room: ignite(rd, room) for room, rd in rooms.items()}
    last = max(due.values())
    # each node's own group gets every wake-up: half of them are for the other node's rooms
    wait_until(lambda: all(len(handled(rd, due)) == len(due) for rd in cl.nodes),
               timeout=(last / 1000 - time.time()) + 15, step=0.2,
               what="every wake-up handled by both nodes (forwarded ones included)")
    for rd in cl.nodes:
        st = handled(rd, due)
        assert set(st.values()) == {200}, st
        held = [ln for ln in rd.log_lines() if "not launched yet" in ln]
        assert not held, held[:3]
    got = launches(cl)
    late = sorted(got[r] - due[r] for r in due)
    print(f"  {ROCKETS} rockets under jwt: late ms min {late[0]} max {late[-1]}; "
          f"forwarded {forwarded_ok(cl) - before:.0f}")
    assert late[0] >= 0 and late[-1] <= 1000, late
    # a non-owner that finds the launch already logged answers the replay itself (the
    # idempotency check comes before the lease), so not every one of them is forwarded
    assert forwarded_ok(cl) > before, "no wake-up went through the forwarder"


def main():
    if listing():
        run([rockets_forwarded_to_admin_on_time], fixture="topology")
    need("127.0.0.1", MYSQL_PORT, "mariadbd (scripts/servers.sh)")
    need("127.0.0.1", REDIS_PORT, "redis-server (scripts/servers.sh)")
    # a consumer group per node: each node handles every wake-up, so the ones of rooms the
    # other node owns are forwarded (deterministically, not as the broker happens to deal)
    cl = Cluster(TMP, nodes=2, extra=AUTH, node_extra=lambda i: {"rocketmq": {"rocket_launch": {
        "consumer_group": f"hyapp-room-rocket-open-{i}"}}})
    try:
        cl.start()
        for rd in cl.nodes:
            with_service_token(rd)

        def rockets_forwarded_to_admin_on_time_():
            rockets_forwarded_to_admin_on_time(cl)
        rockets_forwarded_to_admin_on_time_.__name__ = "rockets_forwarded_to_admin_on_time"
        run([rockets_forwarded_to_admin_on_time_], fixture="topology")
    finally:
        cl.stop()


if __name__ == "__main__":
    main()
