# SPDX-License-Identifier: Apache-2.0
"""test_rocketmq_standin: the RocketMQ stand-in broker checked with an independent client.

ali-ons (npm, a Node client of RocketMQ's remoting protocol) produces and consumes through
tests/standins/rocketmq_standin.py: a round trip with keys and tags (the tag filter at the
broker, messages spread over the topic's queues), a failing consumer's message going
through %RETRY%<group> (delay levels) to %DLQ%<group> after maxReconsumeTimes, a group's
offsets kept across a broker restart (its data dir), the ACL signature (a right one
accepted, a wrong secret refused naming the access key), and the route data in both JSON
forms (fastjson's bare integer keys for old clients, standard JSON for version >= 401)."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "standins"))
from roomd_test import listing, run, wait_until  # noqa: E402
from rocketmq_util import (RocketStandin, alions_available, alions_consume,  # noqa: E402
                           alions_produce, request)


def _standin(tmp, **kw):
    return RocketStandin(tmp, topics=["T_check"], **kw).start()


def test_round_trip_keys_tags():
    with tempfile.TemporaryDirectory() as tmp:
        b = _standin(tmp)
        try:
            msgs = [{"tags": "TagA", "keys": ["k1"], "body": b"one"},
                    {"tags": "TagB", "keys": ["k2"], "body": b"two"},
                    {"tags": "TagA", "keys": ["k3", "k3b"], "body": b"\x00three\xff"}]
            rc, sent, err = alions_produce(b.name_servers, "T_check", msgs)
            assert rc == 0 and [s["sendStatus"] for s in sent] == ["SEND_OK"] * 3, (rc, sent, err)
            assert len({s["queueId"] for s in sent}) > 1, sent  # ali-ons rotates the queues
            rc, got, err = alions_consume(b.name_servers, "G_check_a", "T_check", "TagA", 2, 20)
            assert rc == 0, err
            assert sorted((d["keys"], d["tags"], d["body"]) for d in got) == [
                ("k1", "TagA", b"one"), ("k3 k3b", "TagA", b"\x00three\xff")], got
            st = b.stats()
            assert sum(st["topics"]["T_check"].values()) == 3, st
        finally:
            b.stop()


def test_retry_then_dlq():
    with tempfile.TemporaryDirectory() as tmp:
        b = _standin(tmp)
        try:
            rc, sent, err = alions_produce(b.name_servers, "T_check",
                                           [{"tags": "P", "keys": ["poison"], "body": b"bad"}])
            assert rc == 0, err
            rc, got, err = alions_consume(b.name_servers, "G_check_p", "T_check", "P", 99, 30,
                                          retry=-1, max_reconsume=2, until=2)
            assert [d["reconsumeTimes"] for d in got] == [0, 1, 2], got
            assert got[1]["properties"]["RETRY_TOPIC"] == "T_check", got[1]
            # the last failure's send-back puts it in the DLQ
            wait_until(lambda: b.stats(["%DLQ%G_check_p"])["messages"]["%DLQ%G_check_p"],
                       timeout=10, what="the dead letter")
            st = b.stats(["%RETRY%G_check_p", "%DLQ%G_check_p"])
            retry = st["messages"]["%RETRY%G_check_p"]
            assert [m["reconsume"] for m in retry] == [1, 2], retry
            dlq = st["messages"]["%DLQ%G_check_p"]
            assert len(dlq) == 1 and dlq[0]["reconsume"] == 3, dlq
            assert dlq[0]["body"] == b"bad" and dlq[0]["props"]["KEYS"] == "poison", dlq
            assert dlq[0]["props"]["ORIGIN_MESSAGE_ID"] == sent[0]["msgId"], (dlq, sent)
        finally:
            b.stop()


def test_offsets_across_restart():
    with tempfile.TemporaryDirectory() as tmp:
        b = _standin(tmp)
        try:
            rc, _, err = alions_produce(b.name_servers, "T_check",
                                        [{"tags": "O", "keys": [f"o{i}"], "body": b"x"}
                                         for i in range(4)])
            assert rc == 0, err
            rc, got, err = alions_consume(b.name_servers, "G_check_o", "T_check", "O", 4, 20)
            assert sorted(d["keys"] for d in got) == ["o0", "o1", "o2", "o3"], got
            b.kill()  # kill -9: what the broker kept is on disk
            b.start()
            st = b.stats()
            committed = {k: v for k, v in st["offsets"].items() if k.startswith("G_check_o@T_")}
            assert sum(committed.values()) == 4, st["offsets"]
            rc, _, err = alions_produce(b.name_servers, "T_check",
                                        [{"tags": "O", "keys": ["o4"], "body": b"y"}])
            assert rc == 0, err
            rc, got, err = alions_consume(b.name_servers, "G_check_o", "T_check", "O", 1, 20)
            assert [d["keys"] for d in got] == ["o4"], got  # none of the first four again
        finally:
            b.stop()


def test_acl_signature():
    with tempfile.TemporaryDirectory() as tmp:
        b = _standin(tmp, acl="AK_check:SK_check")
        try:
            m = [{"tags": "S", "keys": ["signed"], "body": b"s"}]
            rc, sent, err = alions_produce(b.name_servers, "T_check", m, access_key="AK_check",
                                           secret_key="SK_check")
            assert rc == 0 and sent[0]["sendStatus"] == "SEND_OK", err
            rc, sent, err = alions_produce(b.name_servers, "T_check", m, access_key="AK_check",
                                           secret_key="wrong")
            assert rc == 1 and "Check signature failed for accessKey=AK_check" in err, (rc, err)
            rc, sent, err = alions_produce(b.name_servers, "T_check", m)
            assert rc == 1 and "No accessKey" in err, (rc, err)
            rc, got, err = alions_consume(b.name_servers, "G_check_s", "T_check", "S", 1, 20,
                                          access_key="AK_check", secret_key="SK_check")
            assert [d["keys"] for d in got] == ["signed"], (got, err)
            assert sum(b.stats()["topics"]["T_check"].values()) == 1  # the refused one: not stored
        finally:
            b.stop()


def test_route_json_forms():
    with tempfile.TemporaryDirectory() as tmp:
        b = _standin(tmp, namesrvs=2)
        try:
            for port in b.ns_ports:
                h, body = request(port, 105, {"topic": "T_check"}, version=121)
                assert h["code"] == 0 and b'"brokerAddrs":{0:"127.0.0.1:' in body, body
                h, body = request(port, 105, {"topic": "T_check"}, version=479)
                route = json.loads(body)
                assert route["brokerDatas"][0]["brokerAddrs"]["0"] == \
                    f"127.0.0.1:{b.broker_port}", route
                assert route["queueDatas"][0]["writeQueueNums"] == 4, route
            h, _ = request(b.ns_ports[0], 105, {"topic": "nope"})
            assert h["code"] == 17, h
        finally:
            b.stop()


if __name__ == "__main__":
    if not listing() and not alions_available():
        print("FAIL: ali-ons not installed in tests/standins (npm ci there)")
        sys.exit(1)
    run([test_round_trip_keys_tags, test_retry_then_dlq, test_offsets_across_restart,
         test_acl_signature, test_route_json_forms])
