# SPDX-License-Identifier: Apache-2.0
"""Request ids across the forwarding hop (issue 29, docs/http.md "Request ids"): two roomd nodes
of the production shape (cluster_util: MariaDB, Redis leases, cluster.forward, publish_mode mq).

A join with X-Request-Id and a W3C traceparent sent to node B for a room node A owns: the answer
echoes both; node B's log lines of the request (it forwards) and node A's (it executes) carry
request_id and trace_id; the command log row (MySQL) holds both; the event's envelope on the
stream carries them in its metadata. A request without the header gets a generated id (a
UUIDv7, echoed and in the log row); a malformed id is refused 400 naming X-Request-Id, nothing
executed; a malformed traceparent is dropped (W3C), the request served.
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import http_util as hu  # noqa: E402
from bus_util import envelope, js_all  # noqa: E402
from cluster_util import MYSQL_PORT, REDIS_PORT, Cluster  # noqa: E402
from roomd_test import listing, need, run, wait_until  # noqa: E402

TMP = tempfile.mkdtemp(prefix="roomd-request-ids-")
RID = "req-it-0001:abc.DEF_9"
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TP = f"00-{TRACE}-00f067aa0ba902b7-01"


def join(rd, room, uid, headers):
    body = {"command_id": hu.cid("join"), "uid": uid}
    return rd.post(f"/v1/rooms/{room}/join", body, headers=headers)


def lines_with(rd, rid):
    out = []
    for line in rd.log_lines():
        if line.startswith("{") and f'"request_id":"{rid}"' in line:
            out.append(json.loads(line))
    return out


def ids_cross_the_hop(cl):
    a, b = cl.nodes
    room = hu.room_name("rid")
    st, _, js = hu.create(a, room)
    assert st == 201, js
    wait_until(lambda: cl.owner_of(room) == 0, timeout=10, what="node A owns the room")

    st, hd, js = join(b, room, 7, {"X-Request-Id": RID, "traceparent": TP})
    assert st == 200, (st, js)
    assert hd.get("X-Request-Id") == RID, hd
    assert hd.get("traceparent") == TP, hd
    # both nodes' log lines of that request carry the ids
    on_b, on_a = lines_with(b, RID), lines_with(a, RID)
    assert on_b, "node B (forwarding) logged nothing with the request id"
    assert on_a, "node A (the owner) logged nothing with the request id"
    assert all(j.get("trace_id") == TRACE for j in on_a + on_b), on_a + on_b
    print(f"  node B: {sorted({j['msg'] for j in on_b})}; node A: {sorted({j['msg'] for j in on_a})}")
    # the command log row
    rows = cl.mysql(f"SELECT request_id, traceparent FROM room_command_log WHERE room_id = '{room}'"
                    " AND command_type = 'JoinRoom'")
    assert rows == [[RID, TP]], rows
    # the event on the stream: the envelope's metadata
    def joined():
        for _, _, data in js_all(cl.nc(), cl.ns + "hyapp_room_outbox"):
            ev = envelope(data)
            if ev.get("room_id") == room and ev.get("event_type") == "RoomUserJoined":
                return ev
        return None
    ev = wait_until(joined, timeout=20, step=0.3, what="the join on the stream")
    assert ev.get("metadata", {}).get("request_id") == RID, ev
    assert ev["metadata"].get("traceparent") == TP, ev

    # no header: a generated id, echoed and stored
    st, hd, js = join(b, room, 8, {})
    assert st == 200, js
    gen = hd.get("X-Request-Id", "")
    assert len(gen) == 36 and gen.count("-") == 4, hd
    assert "traceparent" not in hd, hd
    rows = cl.mysql(f"SELECT request_id FROM room_command_log WHERE room_id = '{room}'"
                    " ORDER BY version DESC LIMIT 1")
    assert rows == [[gen]], rows
    # malformed id: 400 naming it, nothing done; malformed traceparent: dropped, served
    n = cl.mysql(f"SELECT COUNT(*) FROM room_command_log WHERE room_id = '{room}'")
    for bad in ("has space", "x" * 65, "semi;colon"):
        st, _, js = join(b, room, 9, {"X-Request-Id": bad})
        assert st == 400 and js["error"]["field"] == "X-Request-Id", (bad, st, js)
    assert cl.mysql(f"SELECT COUNT(*) FROM room_command_log WHERE room_id = '{room}'") == n
    st, hd, js = join(b, room, 9, {"X-Request-Id": "ok-1", "traceparent": "00-zz-bad"})
    assert st == 200 and hd.get("X-Request-Id") == "ok-1" and "traceparent" not in hd, (st, hd)


def main():
    if listing():
        run([], fixture="hop")
    need("127.0.0.1", MYSQL_PORT, "mariadbd (scripts/servers.sh)")
    need("127.0.0.1", REDIS_PORT, "redis-server (scripts/servers.sh)")
    cl = Cluster(TMP, nodes=2)
    try:
        cl.start()

        def request_ids_cross_the_forwarding_hop():
            ids_cross_the_hop(cl)
        run([request_ids_cross_the_forwarding_hop], fixture="hop")
    finally:
        cl.stop()


if __name__ == "__main__":
    main()
