# SPDX-License-Identifier: Apache-2.0
"""Forwarding between nodes over TLS (issue 11 x issue 12, docs/cluster.md "TLS between nodes").

Two roomd nodes of the cluster_util topology (Redis lease, cluster.forward, mq rocket wake-ups,
a rocket-open group per node so each node handles every wake-up), auth.mode jwt with an admin
token, and TLS on both listeners: one node certificate (IP SAN 127.0.0.1) signed by a test CA,
cluster.tls_ca_file = that CA. Checked:
- a command sent over HTTPS to the node that does not own the room is forwarded (https) to the
  owner and committed once there;
- the nodes view (GET /admin/v1/nodes) asks the peer's admin listener over https: both nodes
  with their readiness; with the wrong CA the owner shows unreachable, the certificate named;
- rockets whose wake-ups reach the non-owner are forwarded to the owner's admin listener (https,
  the admin token) and launch within 1 s of launch_at_ms;
- a node whose cluster.tls_ca_file does not sign the owner's certificate refuses to forward:
  503 not_owner with X-Room-Owner and Retry-After, one warn line naming the certificate problem
  (no secret in any log), and nothing committed by it (the command committed on the owner stays
  committed once).
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import http_util as hu  # noqa: E402
from cluster_util import MYSQL_PORT, REDIS_PORT, Cluster  # noqa: E402
from roomd_test import Roomd, listing, need, run  # noqa: E402
from test_cluster_auth import (ADMIN, AUTH, SECRET, forwarded_ok, ok,  # noqa: E402
                               rockets_forwarded_to_admin_on_time, with_service_token)
from test_http_tls import self_signed  # noqa: E402

TMP = tempfile.mkdtemp(prefix="roomd-cluster-tls-")
FAILED = "forwarding to the room's owner failed"


def node_cert(d, ca_cert, ca_key):
    """A P-256 certificate for 127.0.0.1 (IP SAN: the advertise addresses are IP:port) signed by
    the CA; returns (cert, key)."""
    key, csr, cert = (os.path.join(d, n) for n in ("node.key", "node.csr", "node.pem"))
    ext = os.path.join(d, "node.ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                "extendedKeyUsage=serverAuth\n")
    subprocess.run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-keyout", key, "-out", csr, "-subj", "/CN=127.0.0.1"],
                   check=True, capture_output=True)
    subprocess.run(["openssl", "x509", "-req", "-in", csr, "-CA", ca_cert, "-CAkey", ca_key,
                    "-CAcreateserial", "-out", cert, "-days", "1", "-extfile", ext],
                   check=True, capture_output=True)
    return cert, key


def certificates():
    """(ca, other_ca, node_cert, node_key): other_ca signs nothing the nodes present."""
    dirs = [os.path.join(TMP, n) for n in ("ca", "other-ca", "node")]
    for d in dirs:
        os.makedirs(d, exist_ok=True)
    ca, ca_key = self_signed(dirs[0], subj="/CN=roomd test CA")
    other, _ = self_signed(dirs[1], subj="/CN=another CA")
    cert, key = node_cert(dirs[2], ca, ca_key)
    return ca, other, cert, key


def committed(cl, command_id):
    return int(cl.mysql("SELECT COUNT(*) FROM room_command_log"
                        f" WHERE command_id = '{command_id}'")[0][0])


def command_forwarded_over_https(cl):
    owner, other = cl.nodes
    room = hu.room_name("tlsf")
    ok(hu.create(owner, room), "create")
    assert cl.owner_of(room) == 0
    before = forwarded_ok(cl)
    c = hu.cid("tlsj")
    st, hd, js = hu.join(other, room, 7, command_id=c)
    assert st == 200, (st, js)
    st, _, room_js = hu.get_room(owner, room)
    assert st == 200 and 7 in hu.members(hu.room_of(room_js)), room_js
    assert committed(cl, c) == 1
    assert forwarded_ok(cl) == before + 1
    # the same command again through the non-owner: the owner's replay, still one row
    st, hd, js = hu.join(other, room, 7, command_id=c)
    assert st == 200 and hd.get("Idempotent-Replay") == "true", (st, hd, js)
    assert committed(cl, c) == 1


def nodes(rd):
    st, _, js = rd.admin("GET", "/admin/v1/nodes")
    assert st == 200, (st, js)
    return {n["node_id"]: n for n in js["nodes"]}


def nodes_view_over_https(cl):
    """GET /admin/v1/nodes asks the peer's admin listener over https (the certificate verified
    against cluster.tls_ca_file, the admin token): both nodes, each with its readiness."""
    ids = [rd.cfg["app"]["node_id"] for rd in cl.nodes]
    for i, rd in enumerate(cl.nodes):
        by = nodes(rd)
        assert sorted(by) == sorted(ids), by
        peer = by[ids[1 - i]]
        assert peer["self"] is False and peer["state"] in ("ready", "degraded"), peer
        assert peer["readiness"]["status"] == peer["state"], peer
        assert isinstance(peer["leases"]["count"], int), peer


def rockets_forwarded_over_https(cl):
    """test_cluster_auth's rockets (each node handles every wake-up, forwards those of the
    other node's rooms to its admin listener), here over https: all launch within 1 s."""
    rockets_forwarded_to_admin_on_time(cl)
    for rd in cl.nodes:
        assert not [ln for ln in rd.log_lines() if FAILED in ln]


def restart_with_ca(rd, ca):
    import json
    rd.stop(timeout=20)
    rd.cfg["cluster"]["tls_ca_file"] = ca
    with open(rd.cfg_path, "w") as f:
        json.dump(rd.cfg, f, indent=1)
    rd.start()


def untrusted_owner_refused(cl, other_ca):
    owner, other = cl.nodes
    room = hu.room_name("tlsb")
    ok(hu.create(owner, room), "create")
    c = hu.cid("tlsb")
    ok(hu.join(owner, room, 8, command_id=c), "join on the owner")
    restart_with_ca(other, other_ca)
    with_service_token(other)
    assert cl.owner_of(room) == 0
    failed_before = len([ln for ln in other.log_lines() if FAILED in ln])
    for command_id in (c, hu.cid("tlsb")):  # a retry of the committed one, and a new one
        st, hd, js = hu.join(other, room, 8, command_id=command_id)
        assert st == 503 and js["error"]["code"] == "not_owner", (st, js)
        assert hd.get("X-Room-Owner") == f"127.0.0.1:{owner.port}", hd
        assert int(hd.get("Retry-After", "0")) >= 1, hd
        assert committed(cl, command_id) == (1 if command_id == c else 0)
    lines = [ln for ln in other.log_lines() if FAILED in ln][failed_before:]
    assert len(lines) == 2, lines  # one line per refused request
    # its nodes view cannot ask the owner either: unreachable, the certificate named
    peer = nodes(other)[owner.cfg["app"]["node_id"]]
    assert peer["state"] == "unreachable" and "certificate" in peer["reasons"][0], peer
    assert all("certificate" in ln and "https" in ln for ln in lines), lines
    for rd in cl.nodes:
        text = "\n".join(rd.log_lines()) + rd.stderr_text()
        assert ADMIN not in text and SECRET not in text, "a secret in a log"


def unreadable_ca_file_refused(cl):
    """A CA file that holds no certificate stops start-up naming cluster.tls_ca_file."""
    cfg, d = cl.node_cfg(2)
    bad = os.path.join(d, "not-a-ca.pem")
    with open(bad, "w") as f:
        f.write("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    for ca in (bad, os.path.join(d, "missing.pem")):
        cfg["cluster"]["tls_ca_file"] = ca
        rd = Roomd(cfg, tmp=d)
        rd.start(wait=False)
        try:
            rc = rd.proc.wait(timeout=20)
        finally:
            rd.stop()  # only if it kept running
        text = rd.stderr_text()
        assert rc != 0 and "cluster.tls_ca_file" in text and ca in text, (rc, text)


def main():
    tests = ["command_forwarded_over_https", "nodes_view_over_https",
             "rockets_forwarded_over_https",
             "untrusted_owner_refused", "unreadable_ca_file_refused"]
    if listing():
        run([], fixture="topology")
    need("127.0.0.1", MYSQL_PORT, "mariadbd (scripts/servers.sh)")
    need("127.0.0.1", REDIS_PORT, "redis-server (scripts/servers.sh)")
    ca, other_ca, cert, key = certificates()
    tls = {"tls": {"cert_file": cert, "key_file": key}}
    extra = {"http": dict(tls), "admin": dict(tls), "cluster": {"tls_ca_file": ca}}
    for k, v in AUTH.items():
        extra.setdefault(k, {}).update(v)
    cl = Cluster(TMP, nodes=2, extra=extra, tls_ca=ca, node_extra=lambda i: {"rocketmq": {
        "rocket_launch": {"consumer_group": f"hyapp-room-rocket-open-tls-{i}"}}})
    try:
        cl.start()
        for rd in cl.nodes:
            with_service_token(rd)
        fns = {"command_forwarded_over_https": lambda: command_forwarded_over_https(cl),
               "nodes_view_over_https": lambda: nodes_view_over_https(cl),
               "rockets_forwarded_over_https": lambda: rockets_forwarded_over_https(cl),
               "untrusted_owner_refused": lambda: untrusted_owner_refused(cl, other_ca),
               "unreadable_ca_file_refused": lambda: unreadable_ca_file_refused(cl)}
        for name in tests:
            fns[name].__name__ = name
        run([fns[n] for n in tests], fixture="topology")
    finally:
        cl.stop()


if __name__ == "__main__":
    main()
