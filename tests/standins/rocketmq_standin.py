#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A stand-in RocketMQ name server + broker, speaking the remoting protocol.

No RocketMQ broker can be installed here (it is Java, from Maven), so roomd's
RocketMQ driver is tested against this process. It follows the Apache
broker's source (apache/rocketmq 8fc57f1, ../shared/design/rocketmq.md) on
every code path roomd and ali-ons use:

  frames      int32 total | int32 serType<<24|H | header (JSON, or the
              ROCKETMQ binary form on decode) | body; responses in JSON with
              the request's opaque and flag bit0; oneway (flag bit1) requests
              get no answer
  name server GET_ROUTEINFO_BY_TOPIC 105 (standard JSON for version >= 401 or
              acceptStandardJsonOnly, else fastjson's bare integer keys),
              17 TOPIC_NOT_EXIST for an unknown topic
  broker      SEND_MESSAGE 10 / SEND_MESSAGE_V2 310 / SEND_BATCH_MESSAGE 320,
              PULL_MESSAGE 11 (long polling, tag filter, COMMIT_OFFSET,
              OFFSET_MOVED), QUERY/UPDATE_CONSUMER_OFFSET 14/15,
              GET_MAX/MIN_OFFSET 30/31, SEARCH_OFFSET_BY_TIMESTAMP 29,
              HEART_BEAT 34, UNREGISTER_CLIENT 35, GET_CONSUMER_LIST_BY_GROUP
              38 (+ NOTIFY_CONSUMER_IDS_CHANGED 40 to the group's members),
              CONSUMER_SEND_MSG_BACK 36 (%RETRY%<group> with delay level
              3 + reconsumeTimes, %DLQ%<group> at maxReconsumeTimes),
              UPDATE_AND_CREATE_TOPIC 17
  delays      DELAY levels (messageDelayLevel, --delay-levels) and 5.x timer
              messages (TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS,
              rounded down to the 1000 ms precision as TimerMessageStore does;
              --no-timer: refused with 1 as with timerWheelEnable=false)
  ACL 1.0     --acl AK:SK: every broker request carries AccessKey and
              Signature = base64(HmacSHA1(SK, values of the sorted ext fields
              but Signature + body)); a bad or missing one -> 1 SYSTEM_ERROR
              "Check signature failed for accessKey=<ak>"
  store       --data DIR: the commit log (JSON lines), consumer offsets and
              pending delayed messages survive a restart

Control (for tests): the broker answers the custom request code 9901 with a
JSON body of its counters (messages per topic/queue, offsets).

Usage: rocketmq_standin.py --namesrv-port P [--namesrv-port P2] --broker-port B
       [--data DIR] [--queues 4] [--topic T ...] [--acl AK:SK]
       [--delay-levels "1s 5s ..."] [--no-timer] [--http-port H]
"""

import argparse
import base64
import binascii
import hashlib
import hmac
import http.server
import json
import os
import socket
import socketserver
import struct
import sys
import threading
import time
import zlib

# ---- protocol constants (RequestCode / ResponseCode / sys flags) ----
SEND_MESSAGE, PULL_MESSAGE, QUERY_CONSUMER_OFFSET, UPDATE_CONSUMER_OFFSET = 10, 11, 14, 15
UPDATE_AND_CREATE_TOPIC, SEARCH_OFFSET_BY_TIMESTAMP, GET_MAX_OFFSET, GET_MIN_OFFSET = 17, 29, 30, 31
HEART_BEAT, UNREGISTER_CLIENT, CONSUMER_SEND_MSG_BACK, GET_CONSUMER_LIST_BY_GROUP = 34, 35, 36, 38
NOTIFY_CONSUMER_IDS_CHANGED, GET_ROUTEINFO_BY_TOPIC = 40, 105
SEND_MESSAGE_V2, SEND_BATCH_MESSAGE = 310, 320
CONTROL_STATS = 9901

SUCCESS, SYSTEM_ERROR, MESSAGE_ILLEGAL, TOPIC_NOT_EXIST = 0, 1, 13, 17
PULL_NOT_FOUND, PULL_RETRY_IMMEDIATELY, PULL_OFFSET_MOVED, QUERY_NOT_FOUND = 19, 20, 21, 22
SUBSCRIPTION_NOT_EXIST, REQUEST_CODE_NOT_SUPPORTED = 24, 3

PULL_FLAG_COMMIT_OFFSET, PULL_FLAG_SUSPEND, PULL_FLAG_SUBSCRIPTION = 0x1, 0x2, 0x4

MAGIC_V1 = 0xDAA320A7
PERM_RW = 6
DEFAULT_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
TIMER_PRECISION_MS = 1000
TIMER_MAX_DELAY_MS = 259200 * 1000
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TIMER_TOPIC = "rmq_sys_wheel_timer"
DEFAULT_TOPIC = "TBW102"

SERVER_VERSION = 479
DEBUG = os.environ.get("RMQ_STANDIN_DEBUG", "") not in ("", "0")
STORE_IP = bytes([127, 0, 0, 1])

V2_NAMES = {"a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums",
            "e": "queueId", "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties",
            "j": "reconsumeTimes", "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch",
            "n": "brokerName"}


def now_ms():
    return int(time.time() * 1000)


def log(*a):
    print("rocketmq-standin:", *a, file=sys.stderr, flush=True)


def ext_str(v):
    """An ext field value as the Java side sees it (fastjson HashMap<String,String>)."""
    if v is True:
        return "true"
    if v is False:
        return "false"
    if v is None:
        return None
    return str(v)


def parse_levels(spec):
    out = []
    for tok in spec.split():
        unit = {"s": 1000, "m": 60000, "h": 3600000, "d": 86400000}[tok[-1]]
        out.append(int(tok[:-1]) * unit)
    return out


def props_decode(s):
    out = {}
    for pair in s.split("\x02"):
        if "\x01" in pair:
            k, v = pair.split("\x01", 1)
            if k and v:
                out[k] = v
    return out


def props_encode(p):
    return "".join("%s\x01%s\x02" % (k, v) for k, v in p.items())


# ---- frames ----

def decode_rocketmq_header(h):
    code, lang, ver, opaque, flag = struct.unpack(">hbhii", h[:13])
    pos = 13
    (rlen,) = struct.unpack(">i", h[pos:pos + 4])
    pos += 4
    remark = h[pos:pos + rlen].decode() if rlen > 0 else None
    pos += max(rlen, 0)
    (elen,) = struct.unpack(">i", h[pos:pos + 4])
    pos += 4
    end = pos + elen
    ext = {}
    while pos < end:
        (kl,) = struct.unpack(">h", h[pos:pos + 2])
        pos += 2
        k = h[pos:pos + kl].decode()
        pos += kl
        (vl,) = struct.unpack(">i", h[pos:pos + 4])
        pos += 4
        ext[k] = h[pos:pos + vl].decode()
        pos += vl
    return {"code": code, "language": lang, "version": ver, "opaque": opaque, "flag": flag,
            "remark": remark, "extFields": ext}


def read_frame(sock_file):
    head = sock_file.read(4)
    if len(head) < 4:
        return None
    (total,) = struct.unpack(">i", head)
    if total < 4 or total > 16 * 1024 * 1024:
        raise ValueError("bad frame length %d" % total)
    data = sock_file.read(total)
    if len(data) < total:
        return None
    (hw,) = struct.unpack(">I", data[:4])
    ser, hlen = hw >> 24, hw & 0xFFFFFF
    hdr = data[4:4 + hlen]
    body = data[4 + hlen:]
    if ser == 0:
        cmd = json.loads(hdr.decode("utf-8"))
    elif ser == 1:
        cmd = decode_rocketmq_header(hdr)
    else:
        raise ValueError("unknown serialize type %d" % ser)
    ext = {}
    for k, v in (cmd.get("extFields") or {}).items():
        sv = ext_str(v)
        if sv is not None:
            ext[k] = sv
    cmd["extFields"] = ext
    return cmd, body


def encode_frame(cmd, body=b""):
    hdr = json.dumps(cmd, separators=(",", ":")).encode()
    return struct.pack(">ii", 4 + len(hdr) + len(body), len(hdr)) + hdr + body


def response(req, code, remark=None, ext=None):
    cmd = {"code": code, "flag": 1, "language": "JAVA", "opaque": req.get("opaque", 0),
           "serializeTypeCurrentRPC": "JSON", "version": SERVER_VERSION,
           "extFields": {k: ext_str(v) for k, v in (ext or {}).items()}}
    if remark is not None:
        cmd["remark"] = remark
    return cmd


# ---- the store ----

def tag_hash(tag):
    """Java String.hashCode (tags code), int32."""
    h = 0
    for ch in tag:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


class Store:
    """Commit log, consume queues, offsets and pending delays, all under one lock."""

    def __init__(self, data_dir, queues, levels, timer_enabled):
        self.lock = threading.Condition()
        self.data_dir = data_dir
        self.default_queues = queues
        self.levels = levels
        self.timer_enabled = timer_enabled
        self.v4 = False
        self.topics = {DEFAULT_TOPIC: queues}  # name -> queue count
        self.queues = {}                         # (topic, qid) -> [msg]
        self.by_phys = {}                        # commitLogOffset -> msg
        self.phys = 0
        self.offsets = {}                        # "group@topic@qid" -> offset
        self.pending = []                        # delayed messages (dicts, not yet in their topic)
        self.log_f = None
        if data_dir:
            os.makedirs(data_dir, exist_ok=True)
            self._load()
            self.log_f = open(os.path.join(data_dir, "commitlog.jsonl"), "a")

    # persistence: one JSON line per stored message or delay; offsets in a file
    def _load(self):
        p = os.path.join(self.data_dir, "commitlog.jsonl")
        if os.path.exists(p):
            with open(p) as f:
                for line in f:
                    line = line.strip()
                    if not line:
                        continue
                    rec = json.loads(line)
                    if rec.get("kind") == "topic":
                        self.topics[rec["topic"]] = rec["queues"]
                        continue
                    if rec.get("kind") == "fired":
                        self.pending = [m for m in self.pending if m["phys"] != rec["phys"]]
                        continue
                    m = rec["msg"]
                    m["body"] = base64.b64decode(m["body"])
                    self._index(m)
                    if m["topic"] in (SCHEDULE_TOPIC, TIMER_TOPIC):
                        self.pending.append(m)
        p = os.path.join(self.data_dir, "offsets.json")
        if os.path.exists(p):
            with open(p) as f:
                self.offsets = json.load(f)

    def _append(self, rec):
        if self.log_f:
            self.log_f.write(json.dumps(rec) + "\n")
            self.log_f.flush()

    def save_offsets(self):
        if not self.data_dir:
            return
        p = os.path.join(self.data_dir, "offsets.json")
        with open(p + ".tmp", "w") as f:
            json.dump(self.offsets, f)
        os.replace(p + ".tmp", p)

    def _index(self, m):
        q = self.queues.setdefault((m["topic"], m["queueId"]), [])
        m["queueOffset"] = len(q)
        q.append(m)
        self.by_phys[m["phys"]] = m
        self.phys = max(self.phys, m["phys"] + m["size"])
        self.topics.setdefault(m["topic"], max(self.default_queues, m["queueId"] + 1))

    def ensure_topic(self, topic, nqueues=None):
        if topic not in self.topics:
            self.topics[topic] = nqueues or self.default_queues
            self._append({"kind": "topic", "topic": topic, "queues": self.topics[topic]})
        return self.topics[topic]

    def put(self, topic, qid, body, props, flag=0, sys_flag=0, born_ts=None, reconsume=0,
            born_host=(STORE_IP, 0)):
        """Stores one message (caller holds the lock); returns it."""
        m = {"topic": topic, "queueId": qid, "body": body, "props": props, "flag": flag,
             "sysFlag": sys_flag & ~0x30, "bornTs": born_ts or now_ms(), "storeTs": now_ms(),
             "reconsume": reconsume, "phys": self.phys, "bornHost": list(born_host[0]),
             "bornPort": born_host[1]}
        m["size"] = len(encode_record(m, 0))
        self._index(m)
        rec = dict(m)
        rec["body"] = base64.b64encode(body).decode()
        self._append({"kind": "msg", "msg": rec})
        self.lock.notify_all()
        return m

    def put_maybe_delayed(self, topic, qid, body, props, **kw):
        """A message with DELAY or TIMER_* waits in its schedule topic first
        (HookUtils.handleScheduleMessage); returns (msg, code, remark)."""
        level = int(props.get("DELAY", "0") or 0)
        timer = not self.v4 and any(k in props for k in ("TIMER_DELIVER_MS", "TIMER_DELAY_SEC",
                                                         "TIMER_DELAY_MS"))
        if level > 0 and not topic.startswith("%DLQ%"):
            for k in ("TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS"):
                props.pop(k, None)
            level = min(level, len(self.levels))
            props["REAL_TOPIC"], props["REAL_QID"] = topic, str(qid)
            deliver = now_ms() + self.levels[level - 1]
            props["__STANDIN_DELIVER_MS"] = str(deliver)
            m = self.put(SCHEDULE_TOPIC, level - 1, body, props, **kw)
            self.pending.append(m)
            return m, SUCCESS, None
        if timer:
            if not self.timer_enabled:
                return None, SYSTEM_ERROR, "WHEEL_TIMER_NOT_ENABLE"
            try:
                if "TIMER_DELAY_SEC" in props:
                    deliver = now_ms() + int(props["TIMER_DELAY_SEC"]) * 1000
                elif "TIMER_DELAY_MS" in props:
                    deliver = now_ms() + int(props["TIMER_DELAY_MS"])
                else:
                    deliver = int(props["TIMER_DELIVER_MS"])
            except ValueError:
                return None, MESSAGE_ILLEGAL, "WHEEL_TIMER_MSG_ILLEGAL"
            if deliver > now_ms():
                if deliver - now_ms() > TIMER_MAX_DELAY_MS:
                    return None, MESSAGE_ILLEGAL, "WHEEL_TIMER_MSG_ILLEGAL"
                if deliver % TIMER_PRECISION_MS == 0:
                    deliver -= TIMER_PRECISION_MS
                else:
                    deliver = deliver // TIMER_PRECISION_MS * TIMER_PRECISION_MS
                props["TIMER_OUT_MS"] = str(deliver)
                props["REAL_TOPIC"], props["REAL_QID"] = topic, str(qid)
                props["__STANDIN_DELIVER_MS"] = str(deliver)
                m = self.put(TIMER_TOPIC, 0, body, props, **kw)
                self.pending.append(m)
                return m, SUCCESS, None
        return self.put(topic, qid, body, props, **kw), SUCCESS, None

    def fire_due(self):
        """Moves due delayed messages into their real topic (caller holds the lock)."""
        t = now_ms()
        due = [m for m in self.pending if int(m["props"]["__STANDIN_DELIVER_MS"]) <= t]
        for m in sorted(due, key=lambda x: int(x["props"]["__STANDIN_DELIVER_MS"])):
            self.pending.remove(m)
            p = dict(m["props"])
            topic, qid = p.pop("REAL_TOPIC"), int(p.pop("REAL_QID"))
            for k in ("DELAY", "__STANDIN_DELIVER_MS", "TIMER_OUT_MS", "TIMER_DELIVER_MS",
                      "TIMER_DELAY_SEC", "TIMER_DELAY_MS"):
                p.pop(k, None)
            self.ensure_topic(topic)
            self.put(topic, qid, m["body"], p, flag=m["flag"], sys_flag=m["sysFlag"],
                     born_ts=m["bornTs"], reconsume=m["reconsume"])
            self._append({"kind": "fired", "phys": m["phys"]})


def msg_id_of(m, port):
    return binascii.hexlify(STORE_IP + struct.pack(">iq", port, m["phys"])).decode().upper()


def encode_record(m, port):
    """One stored message as MessageDecoder.decode reads it (V1, IPv4)."""
    body = m["body"]
    topic = m["topic"].encode()
    props = props_encode({k: v for k, v in m["props"].items() if not k.startswith("__STANDIN")})
    props = props.encode()
    crc = zlib.crc32(body) & 0x7FFFFFFF
    born_host = bytes(m.get("bornHost", list(STORE_IP)))
    rest = struct.pack(">iiiqqiq", crc, m["queueId"], m["flag"], m.get("queueOffset", 0),
                       m["phys"], m["sysFlag"], m["bornTs"])
    rest += born_host + struct.pack(">i", m.get("bornPort", 0))
    rest += struct.pack(">q", m["storeTs"]) + STORE_IP + struct.pack(">i", port)
    rest += struct.pack(">iqi", m["reconsume"], 0, len(body)) + body
    rest += struct.pack(">b", len(topic)) + topic + struct.pack(">h", len(props)) + props
    total = 8 + len(rest)
    return struct.pack(">iI", total, MAGIC_V1) + rest


# ---- the servers ----

class Broker:
    def __init__(self, args):
        self.args = args
        self.store = Store(args.data, args.queues, parse_levels(args.delay_levels),
                           not args.no_timer)
        self.store.v4 = args.v4
        global SERVER_VERSION
        SERVER_VERSION = 409 if args.v4 else 479  # MQVersion V4_9_8 / V5_3_3
        for t in args.topic or []:
            with self.store.lock:
                self.store.ensure_topic(t)
        self.acl = tuple(args.acl.split(":", 1)) if args.acl else None
        self.groups = {}   # group -> {clientID: (conn, subscriptions {topic: subString})}
        self.conn_lock = threading.Lock()
        self.stop = False
        threading.Thread(target=self._timer_loop, daemon=True).start()

    def _timer_loop(self):
        while not self.stop:
            with self.store.lock:
                self.store.fire_due()
            time.sleep(0.05)

    # ---- name server ----
    def route(self, req):
        ext = req["extFields"]
        topic = ext.get("topic", "")
        with self.store.lock:
            n = self.store.topics.get(topic)
        if n is None:
            return response(req, TOPIC_NOT_EXIST,
                            "No topic route info in name server for the topic: " + topic), b""
        addr = "127.0.0.1:%d" % self.args.broker_port
        qd = {"brokerName": "broker-a", "readQueueNums": n, "writeQueueNums": n, "perm": PERM_RW,
              "topicSysFlag": 0}
        standard = req.get("version", 0) >= 401 or ext.get("acceptStandardJsonOnly") == "true"
        if standard:
            bd = {"cluster": "DefaultCluster", "brokerName": "broker-a", "brokerAddrs": {"0": addr},
                  "enableActingMaster": False}
            body = json.dumps({"brokerDatas": [bd], "queueDatas": [qd], "filterServerTable": {}})
        else:  # fastjson's default output: HashMap<Long,String> keys are bare numbers
            body = ('{"brokerDatas":[{"brokerAddrs":{0:"%s"},"brokerName":"broker-a",'
                    '"cluster":"DefaultCluster"}],"filterServerTable":{},"queueDatas":[%s]}'
                    % (addr, json.dumps(qd, separators=(",", ":"))))
        return response(req, SUCCESS), body.encode()

    # ---- ACL (PlainAccessValidator / AclUtils) ----
    def check_acl(self, req, body):
        if not self.acl:
            return None
        ext = req["extFields"]
        ak = ext.get("AccessKey")
        if ak is None:
            return "No accessKey is configured"
        if ak != self.acl[0]:
            return "No acl config for %s" % ak
        content = "".join(ext[k] for k in sorted(ext) if k != "Signature").encode() + body
        want = base64.b64encode(hmac.new(self.acl[1].encode(), content, hashlib.sha1).digest())
        if ext.get("Signature", "").encode() != want:
            return "Check signature failed for accessKey=%s" % ak
        return None

    # ---- broker requests ----
    def handle(self, conn, req, body):
        code = req.get("code")
        if code == GET_ROUTEINFO_BY_TOPIC:
            return self.route(req)
        bad = self.check_acl(req, body) if code != CONTROL_STATS else None
        if bad:
            return response(req, SYSTEM_ERROR, bad), b""
        fn = {SEND_MESSAGE: self.send, SEND_MESSAGE_V2: self.send, SEND_BATCH_MESSAGE: self.send,
              PULL_MESSAGE: self.pull, QUERY_CONSUMER_OFFSET: self.query_offset,
              UPDATE_CONSUMER_OFFSET: self.update_offset, GET_MAX_OFFSET: self.max_offset,
              GET_MIN_OFFSET: self.min_offset, SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset,
              HEART_BEAT: self.heartbeat, UNREGISTER_CLIENT: self.unregister,
              GET_CONSUMER_LIST_BY_GROUP: self.consumer_list,
              CONSUMER_SEND_MSG_BACK: self.send_back, UPDATE_AND_CREATE_TOPIC: self.create_topic,
              CONTROL_STATS: self.stats}.get(code)
        if fn is None:
            return response(req, REQUEST_CODE_NOT_SUPPORTED,
                            "request type %s not supported" % code), b""
        return fn(conn, req, body)

    def send(self, conn, req, body):
        ext = req["extFields"]
        if req["code"] in (SEND_MESSAGE_V2, SEND_BATCH_MESSAGE):
            ext = {V2_NAMES.get(k, k): v for k, v in ext.items()}
        topic = ext.get("topic", "")
        if not topic or len(topic) > 127 and not topic.startswith("%RETRY%"):
            return response(req, MESSAGE_ILLEGAL, "topic illegal"), b""
        props = props_decode(ext.get("properties", ""))
        qid = int(ext.get("queueId", "0"))
        reconsume = int(ext.get("reconsumeTimes", "0") or 0)
        with self.store.lock:
            if topic not in self.store.topics:
                n = min(int(ext.get("defaultTopicQueueNums", "4") or 4),
                        self.store.topics[DEFAULT_TOPIC])
                self.store.ensure_topic(topic, n)
            n = self.store.topics[topic]
            if qid < 0 or qid >= n:
                qid = qid % n
            if topic.startswith("%RETRY%"):  # a client's own retry copy
                maxr = int(ext.get("maxReconsumeTimes", "16") or 16)
                if reconsume > maxr:
                    topic = "%DLQ%" + topic[len("%RETRY%"):]
                    self.store.ensure_topic(topic, 1)
                    qid = 0
                    props.pop("DELAY", None)
            kw = {"flag": int(ext.get("flag", "0") or 0), "sys_flag": int(ext.get("sysFlag", "0")),
                  "born_ts": int(ext.get("bornTimestamp", "0") or 0) or None, "reconsume": reconsume}
            if req["code"] == SEND_BATCH_MESSAGE:
                msgs = decode_batch(body)
                ids, first = [], None
                for b_body, b_props, b_flag in msgs:
                    p = dict(props)
                    p.update(b_props)
                    kw["flag"] = b_flag
                    m, code, remark = self.store.put_maybe_delayed(topic, qid, b_body, p, **kw)
                    first = first or m
                    ids.append(msg_id_of(m, self.args.broker_port))
                m = first
                mid = ",".join(ids)
            else:
                m, code, remark = self.store.put_maybe_delayed(topic, qid, body, props, **kw)
                if code != SUCCESS:
                    return response(req, code, remark), b""
                mid = msg_id_of(m, self.args.broker_port)
        ext_out = {"msgId": mid, "queueId": qid, "queueOffset": m["queueOffset"]}
        return response(req, SUCCESS, None, ext_out), b""

    def _subscription(self, group, topic):
        with self.conn_lock:
            for _, (c, subs) in self.groups.get(group, {}).items():
                if topic in subs:
                    return subs[topic]
        return None

    def pull(self, conn, req, body):
        ext = req["extFields"]
        group, topic = ext.get("consumerGroup", ""), ext.get("topic", "")
        qid, off = int(ext.get("queueId", "0")), int(ext.get("queueOffset", "0"))
        maxn = max(1, int(ext.get("maxMsgNums", "32")))
        flag = int(ext.get("sysFlag", "0"))
        suspend_ms = int(ext.get("suspendTimeoutMillis", "15000"))
        if flag & PULL_FLAG_SUBSCRIPTION:
            sub = ext.get("subscription", "*") or "*"
        else:
            sub = self._subscription(group, topic)
            if sub is None:
                return response(req, SUBSCRIPTION_NOT_EXIST,
                                "the consumer's subscription not exist"), b""
        tags = None if sub.strip() in ("*", "") else {t.strip() for t in sub.split("||")}
        if flag & PULL_FLAG_COMMIT_OFFSET and int(ext.get("commitOffset", "-1")) >= 0:
            with self.store.lock:
                self.store.offsets["%s@%s@%d" % (group, topic, qid)] = int(ext["commitOffset"])
                self.store.save_offsets()
        deadline = time.time() + (suspend_ms / 1000.0 if flag & PULL_FLAG_SUSPEND else 0)
        with self.store.lock:
            while True:
                q = self.store.queues.get((topic, qid), [])
                if topic not in self.store.topics:
                    return response(req, TOPIC_NOT_EXIST, "topic[%s] not exist" % topic), b""
                mx = len(q)
                hdr = {"suggestWhichBrokerId": 0, "minOffset": 0, "maxOffset": mx}
                if mx == 0 and off != 0 or off > mx:
                    hdr["nextBeginOffset"] = mx if mx else 0
                    return response(req, PULL_OFFSET_MOVED, "OFFSET_OVERFLOW_BADLY", hdr), b""
                if off < mx:
                    found, nxt = [], off
                    for m in q[off:]:
                        if len(found) >= maxn:
                            break
                        nxt = m["queueOffset"] + 1
                        if tags is None or m["props"].get("TAGS") in tags:
                            found.append(m)
                    hdr["nextBeginOffset"] = nxt
                    if not found:
                        return response(req, PULL_RETRY_IMMEDIATELY, "NO_MATCHED_MESSAGE",
                                        hdr), b""
                    out = b"".join(encode_record(m, self.args.broker_port) for m in found)
                    return response(req, SUCCESS, "FOUND", hdr), out
                left = deadline - time.time()
                if left <= 0:
                    hdr["nextBeginOffset"] = off
                    status = "OFFSET_OVERFLOW_ONE" if mx else "NO_MESSAGE_IN_QUEUE"
                    return response(req, PULL_NOT_FOUND, status, hdr), b""
                self.store.lock.wait(min(left, 0.5))

    def query_offset(self, conn, req, body):
        ext = req["extFields"]
        key = "%s@%s@%s" % (ext.get("consumerGroup"), ext.get("topic"), ext.get("queueId"))
        with self.store.lock:
            if self.store.offsets.get(key, -1) >= 0:
                return response(req, SUCCESS, None, {"offset": self.store.offsets[key]}), b""
            # ConsumerManageProcessor: never committed; unless setZeroIfNotFound is false,
            # 0 when the queue's first message is still in memory (all of them are here)
            q = self.store.queues.get((ext.get("topic"), int(ext.get("queueId", "0"))), [])
            if ext.get("setZeroIfNotFound") != "false" and q:
                return response(req, SUCCESS, None, {"offset": 0}), b""
        return response(req, QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group "
                        "consumer boot first"), b""

    def update_offset(self, conn, req, body):
        ext = req["extFields"]
        key = "%s@%s@%s" % (ext.get("consumerGroup"), ext.get("topic"), ext.get("queueId"))
        with self.store.lock:
            self.store.offsets[key] = int(ext.get("commitOffset", "0"))
            self.store.save_offsets()
        return response(req, SUCCESS), b""

    def max_offset(self, conn, req, body):
        ext = req["extFields"]
        with self.store.lock:
            q = self.store.queues.get((ext.get("topic"), int(ext.get("queueId", "0"))), [])
            return response(req, SUCCESS, None, {"offset": len(q)}), b""

    def min_offset(self, conn, req, body):
        return response(req, SUCCESS, None, {"offset": 0}), b""

    def search_offset(self, conn, req, body):
        ext = req["extFields"]
        ts = int(ext.get("timestamp", "0"))
        with self.store.lock:
            q = self.store.queues.get((ext.get("topic"), int(ext.get("queueId", "0"))), [])
            off = next((m["queueOffset"] for m in q if m["storeTs"] >= ts), len(q))
        return response(req, SUCCESS, None, {"offset": off}), b""

    def heartbeat(self, conn, req, body):
        hb = json.loads(body.decode() or "{}")
        cid = hb.get("clientID", "")
        changed = []
        with self.conn_lock:
            for cd in hb.get("consumerDataSet", []) or []:
                g = cd.get("groupName", "")
                subs = {s.get("topic"): s.get("subString", "*")
                        for s in cd.get("subscriptionDataSet", []) or []}
                members = self.groups.setdefault(g, {})
                if cid not in members:
                    changed.append(g)
                members[cid] = (conn, subs)
                conn.clients.add((g, cid))
        for cd in hb.get("consumerDataSet", []) or []:
            with self.store.lock:
                self.store.ensure_topic("%RETRY%" + cd.get("groupName", ""), 1)
        for g in changed:
            self.notify_changed(g, exclude=conn)
        return response(req, SUCCESS), b""

    def notify_changed(self, group, exclude=None):
        with self.conn_lock:
            conns = {c for c, _ in self.groups.get(group, {}).values() if c is not exclude}
        for c in conns:
            c.send_request(NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group}, oneway=True)

    def drop_conn(self, conn):
        gone = set()
        with self.conn_lock:
            for g, cid in conn.clients:
                if self.groups.get(g, {}).get(cid, (None,))[0] is conn:
                    del self.groups[g][cid]
                    gone.add(g)
        for g in gone:
            self.notify_changed(g)

    def unregister(self, conn, req, body):
        ext = req["extFields"]
        g, cid = ext.get("consumerGroup"), ext.get("clientID")
        with self.conn_lock:
            removed = self.groups.get(g, {}).pop(cid, None) is not None
        if removed:
            self.notify_changed(g)
        return response(req, SUCCESS), b""

    def consumer_list(self, conn, req, body):
        g = req["extFields"].get("consumerGroup", "")
        with self.conn_lock:
            ids = sorted(self.groups.get(g, {}).keys())
        if not ids:
            return response(req, SYSTEM_ERROR, "no consumer for this group, " + g), b""
        return response(req, SUCCESS), json.dumps({"consumerIdList": ids}).encode()

    def send_back(self, conn, req, body):
        ext = req["extFields"]
        group = ext.get("group", "")
        with self.store.lock:
            orig = self.store.by_phys.get(int(ext.get("offset", "-1")))
            if orig is None:
                return response(req, SYSTEM_ERROR,
                                "look message by offset failed, " + ext.get("offset", "")), b""
            props = dict(orig["props"])
            props.setdefault("RETRY_TOPIC", orig["topic"])
            delay = int(ext.get("delayLevel", "0"))
            maxr = 16
            if req.get("version", 0) >= 121 and ext.get("maxReconsumeTimes") not in (None, ""):
                maxr = int(ext["maxReconsumeTimes"])
            if orig["reconsume"] >= maxr or delay < 0:
                topic = "%DLQ%" + group
                self.store.ensure_topic(topic, 1)
                props.pop("DELAY", None)
            else:
                topic = "%RETRY%" + group
                self.store.ensure_topic(topic, 1)
                props["DELAY"] = str(delay if delay else 3 + orig["reconsume"])
            props.setdefault("ORIGIN_MESSAGE_ID", msg_id_of(orig, self.args.broker_port))
            props.pop("__STANDIN_DELIVER_MS", None)
            self.store.put_maybe_delayed(topic, 0, orig["body"], props, flag=orig["flag"],
                                         sys_flag=orig["sysFlag"], born_ts=orig["bornTs"],
                                         reconsume=orig["reconsume"] + 1)
        return response(req, SUCCESS), b""

    def create_topic(self, conn, req, body):
        ext = req["extFields"]
        with self.store.lock:
            self.store.ensure_topic(ext.get("topic"), int(ext.get("writeQueueNums", "4")))
        return response(req, SUCCESS), b""

    def stats(self, conn, req, body):
        with self.store.lock:
            topics = {}
            for (t, q), msgs in self.store.queues.items():
                topics.setdefault(t, {})[str(q)] = len(msgs)
            out = {"topics": topics, "offsets": self.store.offsets,
                   "pending": len(self.store.pending),
                   "messages": {t: [{"queueId": m["queueId"], "queueOffset": m["queueOffset"],
                                     "props": {k: v for k, v in m["props"].items()
                                               if not k.startswith("__")},
                                     "reconsume": m["reconsume"], "storeTs": m["storeTs"],
                                     "body": base64.b64encode(m["body"]).decode()}
                                    for q in sorted(self.store.queues)
                                    if q[0] == t for m in self.store.queues[q]]
                              for t in (req["extFields"].get("topics", "").split(",")
                                        if req["extFields"].get("topics") else [])}}
        return response(req, SUCCESS), json.dumps(out).encode()


def decode_batch(body):
    out, pos = [], 0
    while pos + 20 <= len(body):
        total, _magic, _crc, flag, blen = struct.unpack(">iiiii", body[pos:pos + 20])
        b = body[pos + 20:pos + 20 + blen]
        p = pos + 20 + blen
        (plen,) = struct.unpack(">h", body[p:p + 2])
        props = props_decode(body[p + 2:p + 2 + plen].decode())
        out.append((b, props, flag))
        pos += total
    return out


class Conn(socketserver.StreamRequestHandler):
    def setup(self):
        super().setup()
        self.wlock = threading.Lock()
        self.clients = set()
        self.next_opaque = 1 << 30

    def send_request(self, code, ext, oneway=False):
        self.next_opaque += 1
        cmd = {"code": code, "flag": 2 if oneway else 0, "language": "JAVA",
               "opaque": self.next_opaque, "version": 479, "extFields": ext}
        try:
            with self.wlock:
                self.wfile.write(encode_frame(cmd))
        except OSError:
            pass

    def handle(self):
        broker = self.server.broker
        try:
            while True:
                fr = read_frame(self.rfile)
                if fr is None:
                    break
                req, body = fr
                if req.get("flag", 0) & 1:
                    continue  # a response to one of our requests
                # one thread per request so a long poll does not stop the others
                threading.Thread(target=self._one, args=(broker, req, body), daemon=True).start()
        except (OSError, ValueError) as e:
            log("connection closed:", e)
        finally:
            broker.drop_conn(self)

    def _one(self, broker, req, body):
        try:
            resp, rbody = broker.handle(self, req, body)
            if DEBUG:
                log("req", req.get("code"), req["extFields"], "->", resp["code"], resp.get("remark"))
        except Exception as e:  # a bad request: SYSTEM_ERROR, as the broker's processors do
            log("request", req.get("code"), "failed:", repr(e))
            resp, rbody = response(req, SYSTEM_ERROR, "standin: %r" % e), b""
        if req.get("flag", 0) & 2:
            return  # oneway: never answered
        try:
            with self.wlock:
                self.wfile.write(encode_frame(resp, rbody))
        except OSError:
            pass


class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


class NsAddr(http.server.BaseHTTPRequestHandler):
    """The name server address service (GET /rocketmq/nsaddr -> "host:port;host:port")."""

    def do_GET(self):
        body = ";".join("127.0.0.1:%d" % p for p in self.server.ports).encode()
        self.send_response(200 if self.path.startswith("/rocketmq/") else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--namesrv-port", type=int, action="append", required=True)
    ap.add_argument("--broker-port", type=int, required=True)
    ap.add_argument("--data", default="")
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--topic", action="append")
    ap.add_argument("--acl", default="")
    ap.add_argument("--delay-levels", default=DEFAULT_LEVELS)
    ap.add_argument("--no-timer", action="store_true")
    ap.add_argument("--v4", action="store_true",
                    help="a 4.x broker: answers with version V4_9_8 and knows no timer "
                         "messages (TIMER_* properties are stored as plain properties)")
    ap.add_argument("--http-port", type=int, default=0)
    args = ap.parse_args()
    broker = Broker(args)
    servers = []
    for p in args.namesrv_port + [args.broker_port]:
        s = Server(("127.0.0.1", p), Conn)
        s.broker = broker
        servers.append(s)
        threading.Thread(target=s.serve_forever, daemon=True).start()
    if args.http_port:
        h = http.server.ThreadingHTTPServer(("127.0.0.1", args.http_port), NsAddr)
        h.ports = args.namesrv_port
        threading.Thread(target=h.serve_forever, daemon=True).start()
    log("ready", "namesrv=%s broker=%d" % (args.namesrv_port, args.broker_port))
    print("READY", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
