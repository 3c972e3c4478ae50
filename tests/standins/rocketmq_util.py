# SPDX-License-Identifier: Apache-2.0
"""rocketmq_util: the RocketMQ stand-in (rocketmq_standin.py) and ali-ons (rocketmq_alions.js)
as the Python tests drive them.

RocketStandin(tmp, ...).start() runs one name server (or several) + broker with a data dir
under tmp; stop() / kill() / start() again keep the data (offsets, messages, delays).
stats(topics) asks the broker's control request (9901) for its counters and the messages of
the topics named; request(port, code, ext) sends one remoting request and returns
(header, body). alions_produce / alions_consume run the ali-ons client."""
import base64
import json
import os
import shutil
import signal
import socket
import struct
import subprocess

from standins import free_port, wait_port

HERE = os.path.dirname(os.path.abspath(__file__))
# Short delay levels (a broker's messageDelayLevel is configurable): retries in seconds.
TEST_LEVELS = "1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s"


def alions_available():
    return shutil.which("node") is not None and \
        os.path.isdir(os.path.join(HERE, "node_modules", "ali-ons"))


class RocketStandin:
    def __init__(self, tmp, topics=(), queues=4, acl=None, levels=TEST_LEVELS, timer=True,
                 namesrvs=1, v4=False, http=False):
        self.tmp = tmp
        self.ns_ports = [free_port() for _ in range(namesrvs)]
        self.broker_port = free_port()
        self.data = os.path.join(tmp, f"rocketmq-{self.broker_port}")
        self.args = ["--broker-port", str(self.broker_port), "--data", self.data,
                     "--queues", str(queues), "--delay-levels", levels]
        for p in self.ns_ports:
            self.args += ["--namesrv-port", str(p)]
        for t in topics:
            self.args += ["--topic", t]
        if acl:
            self.args += ["--acl", acl]
        if not timer:
            self.args.append("--no-timer")
        if v4:
            self.args.append("--v4")
        self.http_port = free_port() if http else 0
        if http:  # the name server address service: GET /rocketmq/nsaddr
            self.args += ["--http-port", str(self.http_port)]
        self.proc = None

    @property
    def name_servers(self):
        return [f"127.0.0.1:{p}" for p in self.ns_ports]

    def start(self):
        self.log = open(os.path.join(self.tmp, f"rocketmq-standin-{self.broker_port}.log"), "ab")
        self.proc = subprocess.Popen(
            ["python3", "-u", os.path.join(HERE, "rocketmq_standin.py"), *self.args],
            stdout=self.log, stderr=self.log)
        wait_port(self.broker_port, self.proc)
        for p in self.ns_ports:
            wait_port(p, self.proc)
        return self

    def stop(self, sig=signal.SIGTERM):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(10)
        self.proc = None

    def kill(self):
        self.stop(signal.SIGKILL)

    def stats(self, topics=()):
        h, body = request(self.broker_port, 9901, {"topics": ",".join(topics)})
        out = json.loads(body)
        for msgs in out["messages"].values():
            for m in msgs:
                m["body"] = base64.b64decode(m["body"])
        return out


def request(port, code, ext, body=b"", version=479, timeout=10):
    """One JSON remoting request on a fresh connection; returns (header dict, body bytes)."""
    hdr = json.dumps({"code": code, "flag": 0, "language": "PYTHON", "opaque": 1,
                      "version": version, "extFields": ext}).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(struct.pack(">ii", 4 + len(hdr) + len(body), len(hdr)) + hdr + body)
        data = b""
        while len(data) < 4:
            data += s.recv(4 - len(data))
        (total,) = struct.unpack(">i", data)
        data = b""
        while len(data) < total:
            chunk = s.recv(total - len(data))
            if not chunk:
                raise OSError("connection closed")
            data += chunk
    finally:
        s.close()
    (hw,) = struct.unpack(">I", data[:4])
    hl = hw & 0xFFFFFF
    return json.loads(data[4:4 + hl]), data[4 + hl:]


def _node_env(access_key=None, secret_key=None, namespace=None):
    env = dict(os.environ)
    for k, v in (("ONS_ACCESS_KEY", access_key), ("ONS_SECRET_KEY", secret_key),
                 ("ONS_NAMESPACE", namespace)):
        if v:
            env[k] = v
    return env


def alions_produce(name_servers, topic, msgs, **keys):
    """Sends msgs ([{tags, keys: [..], body: bytes, delayLevel}]) with ali-ons; returns
    (rc, [send results], stderr)."""
    wire = [dict(m, body=base64.b64encode(m.get("body", b"")).decode()) for m in msgs]
    p = subprocess.run(["node", os.path.join(HERE, "rocketmq_alions.js"), "produce",
                        ",".join(name_servers), topic, json.dumps(wire)],
                       capture_output=True, text=True, timeout=60, env=_node_env(**keys))
    return p.returncode, [json.loads(x) for x in p.stdout.splitlines() if x], p.stderr


def alions_consume(name_servers, group, topic, tags, count, seconds, retry=0, max_reconsume=16,
                   until=None, **keys):
    """Consumes with an ali-ons clustering push consumer until count messages were handled
    (a delivery with reconsumeTimes < retry fails; retry -1: every one), a delivery with
    reconsumeTimes >= until came, or seconds passed;
    returns (rc, [deliveries: topic tags keys body(bytes) reconsumeTimes ...], stderr)."""
    p = subprocess.run(["node", os.path.join(HERE, "rocketmq_alions.js"), "consume",
                        ",".join(name_servers), group, topic, tags, str(count), str(seconds),
                        f"retry={retry}", f"maxReconsume={max_reconsume}"] +
                       ([f"until={until}"] if until is not None else []),
                       capture_output=True, text=True, timeout=seconds + 60,
                       env=_node_env(**keys))
    out = []
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            d = json.loads(line)
            d["body"] = base64.b64decode(d["body"])
            out.append(d)
    return p.returncode, out, p.stderr
