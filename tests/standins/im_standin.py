#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""im_standin.py: a Tencent Cloud IM REST stand-in for roomd's tests (HTTPS, stdlib only).

Follows shared/design/tencent-im-rest.md: POST /v4/{service}/{command}?sdkappid=&identifier=
&usersig=&random=&contenttype=json, JSON envelopes {ActionStatus, ErrorCode, ErrorInfo}, HTTP 200.
Every request's UserSig is verified (decode, inflate, check sdkappid/identifier/expiry, recompute
the HMAC-SHA256 with the same key). Group messages are deduplicated like IM does: the same Random
and the same MsgBody within 5 minutes is discarded (answered OK, not stored again); C2C by
MsgSeq + MsgRandom + CRC32(body) within 120 s.

Implemented: group_open_http_svc/{create_group, get_group_info, destroy_group, send_group_msg,
add_group_member, delete_group_member, forbid_send_msg, ban_group_member}, openim/sendmsg.

Test endpoints (same port):
  GET  /_calls      every API call: {api, body, code, dup, sig_ok, t}
  GET  /_state      {groups, messages, c2c}
  POST /_control    {"fail": {"api": "send_group_msg"|"*", "code": 80001, "count": 1}}
                    {"http_status": {"api": .., "status": 502, "count": 1}}
                    {"slow": {"api": .., "ms": 3000, "count": 1}}  (do the work, answer late)
                    any of them with "match": "text": only calls whose JSON body contains
                    text (one event's content: poison that times out)
                    any of them with "for_ms": N instead of "count": every matching call for
                    the next N ms (e.g. {"fail": {"api": "send_group_msg", "code": 10023,
                    "for_ms": 3000}}: IM's group frequency limit answered for 3 s, or
                    {"http_status": {"api": "*", "status": 429, "for_ms": 3000}})
                    {"limits": {"per_api": 200, "per_group": 40}}  IM's frequency control: more
                    than per_api calls of one API, or per_group send_group_msg to one group,
                    within the last second answer 60007 / 10023 (0 = off, the default)
                    {"reset": true}
"Down" is the test stopping this process. State (groups, messages, dedupe table, calls) is kept
in --state so a restarted stand-in continues where the stopped one was.

Usage: im_standin.py --port P --cert C --key K --sdkappid N --admin ID --state FILE
       (secret key in the environment variable IM_STANDIN_SECRET)
"""
import argparse
import base64
import binascii
import hashlib
import hmac
import http.server
import json
import os
import signal
import ssl
import sys
import threading
import time
import urllib.parse
import zlib

LOCK = threading.Lock()
STATE = {"groups": {}, "messages": [], "c2c": [], "dedupe": {}, "c2c_dedupe": {}, "calls": [],
         "seq": 0}
SCRIPT = {"fail": [], "http_status": [], "slow": []}
LIMITS = {"per_api": 0, "per_group": 0}
WINDOWS = {}  # ("api", name) / ("group", id) -> [times of admitted calls in the last second]
ARGS = None
GROUP_TYPES = {"Private", "Work", "Public", "ChatRoom", "Meeting", "AVChatRoom", "Community"}


DIRTY = threading.Event()


def save():
    """Marks the state changed; the flusher writes it within 50 ms (and at SIGTERM), so a
    busy stand-in does not rewrite its whole state on every call. A large state (thousands of
    calls) is written less often: at most a fifth of the time goes to writing it, so the
    calls it holds up (the lock) are not slowed down to IM timeouts."""
    DIRTY.set()


def flusher():
    took = 0.0
    while True:
        DIRTY.wait()
        time.sleep(max(0.05, 4 * took))
        with LOCK:
            t = time.monotonic()
            DIRTY.clear()
            write_state()
            took = time.monotonic() - t


def write_state():
    tmp = ARGS.state + ".tmp"
    with open(tmp, "w") as f:
        json.dump(STATE, f)
    os.replace(tmp, ARGS.state)


def load():
    global STATE
    if ARGS.state and os.path.exists(ARGS.state):
        with open(ARGS.state) as f:
            STATE = json.load(f)


def verify_usersig(sig, key, sdkappid, identifier, now):
    """Go VerifyUserSig: returns None when valid, else the reason."""
    try:
        raw = sig.replace("*", "+").replace("-", "/").replace("_", "=")
        doc = json.loads(zlib.decompress(base64.b64decode(raw, validate=True)))
    except (ValueError, binascii.Error, zlib.error) as e:
        return f"undecodable usersig: {e}"
    for k in ("TLS.ver", "TLS.identifier", "TLS.sdkappid", "TLS.time", "TLS.expire", "TLS.sig"):
        if k not in doc:
            return f"usersig lacks {k}"
    if doc["TLS.ver"] != "2.0":
        return "usersig version"
    if doc["TLS.sdkappid"] != sdkappid:
        return "sdkappid mismatch"
    if doc["TLS.identifier"] != identifier:
        return "identifier mismatch"
    if now > doc["TLS.time"] + doc["TLS.expire"]:
        return "usersig expired"
    text = (f"TLS.identifier:{doc['TLS.identifier']}\nTLS.sdkappid:{doc['TLS.sdkappid']}\n"
            f"TLS.time:{doc['TLS.time']}\nTLS.expire:{doc['TLS.expire']}\n")
    want = base64.b64encode(hmac.new(key.encode(), text.encode(), hashlib.sha256).digest())
    if not hmac.compare_digest(want.decode(), doc["TLS.sig"]):
        return "signature mismatch"
    return None


def take(kind, api, body=None):
    """Pops the first scripted entry of kind for api (or "*") whose "match" text, if any, is
    in the call's JSON body."""
    text = json.dumps(body, ensure_ascii=False) if body is not None else ""
    now = time.time()
    for e in list(SCRIPT[kind]):
        if "until" in e and now >= e["until"]:
            SCRIPT[kind].remove(e)  # a "for_ms" entry whose time is over
            continue
        if e.get("api") in (api, "*") and e.get("match", "") in text:
            if "until" in e:
                return e  # every matching call until then
            e["count"] = e.get("count", 1) - 1
            if e["count"] <= 0:
                SCRIPT[kind].remove(e)
            return e
    return None


def over_limit(api, body, now):
    """IM's frequency control: the refusal for this call, or None (then it is counted)."""
    keys = []
    if LIMITS["per_api"] > 0:
        keys.append((("api", api), LIMITS["per_api"], 60007, f"{api}: over {LIMITS['per_api']}/s"))
    if LIMITS["per_group"] > 0 and api == "send_group_msg" and isinstance(body, dict):
        keys.append((("group", body.get("GroupId")), LIMITS["per_group"], 10023,
                     f"group over {LIMITS['per_group']} msgs/s"))
    for key, limit, code, info in keys:
        w = [t for t in WINDOWS.get(key, []) if t > now - 1.0]
        WINDOWS[key] = w
        if len(w) >= limit:
            return fail(code, info)
    for key, _, _, _ in keys:
        WINDOWS[key].append(now)
    return None


def fail(code, info):
    return {"ActionStatus": "FAIL", "ErrorCode": code, "ErrorInfo": info}


def ok(**kw):
    r = {"ActionStatus": "OK", "ErrorCode": 0, "ErrorInfo": ""}
    r.update(kw)
    return r


def is_av(g):
    return g["Type"] == "AVChatRoom"


def api_create_group(b, now):
    t, name, gid = b.get("Type"), b.get("Name"), b.get("GroupId")
    if t not in GROUP_TYPES:
        return fail(10003, "invalid Type")
    if not isinstance(name, str) or not name or len(name.encode()) > 30:
        return fail(10004, "invalid Name")
    if not isinstance(gid, str) or not gid or len(gid.encode()) > 48 or gid.startswith("@TGS#"):
        return fail(10004, "invalid GroupId")
    if t == "AVChatRoom" and b.get("MemberList"):
        return fail(10007, "AVChatRoom takes no MemberList")
    if gid in STATE["groups"]:
        return fail(10025, "group id has been used by you")
    STATE["groups"][gid] = {"Type": {"Work": "Private", "Meeting": "ChatRoom"}.get(t, t),
                            "Name": name, "ApplyJoinOption": b.get("ApplyJoinOption", ""),
                            "members": [], "muted": {}, "banned": {}, "CreateTime": int(now)}
    return ok(GroupId=gid)


def api_get_group_info(b, now):
    items = []
    for gid in b.get("GroupIdList", []):
        g = STATE["groups"].get(gid)
        if g is None:
            items.append({"GroupId": gid, "ErrorCode": 10010, "ErrorInfo": "group not found"})
        else:
            items.append({"GroupId": gid, "ErrorCode": 0, "ErrorInfo": "", "Type": g["Type"],
                          "Name": g["Name"], "CreateTime": g["CreateTime"],
                          "MemberNum": len(g["members"])})
    return ok(GroupInfo=items)


def api_destroy_group(b, now):
    if STATE["groups"].pop(b.get("GroupId"), None) is None:
        return fail(10010, "group not found")
    return ok()


def api_send_group_msg(b, now):
    gid = b.get("GroupId")
    g = STATE["groups"].get(gid)
    if g is None:
        return fail(10010, "group not found")
    rnd, body = b.get("Random"), b.get("MsgBody")
    if not isinstance(rnd, int) or not 0 <= rnd <= 0xFFFFFFFF:
        return fail(10004, "invalid Random")
    if not isinstance(body, list) or not body:
        return fail(10004, "invalid MsgBody")
    if sum(1 for e in body if e.get("MsgType") == "TIMCustomElem") > 1:
        return fail(10004, "at most one TIMCustomElem")
    content = json.dumps(body, sort_keys=True, ensure_ascii=False)
    if len(content.encode()) > 12000:
        return fail(93000, "message too long")
    key = f"{gid}|{rnd}|{hashlib.sha256(content.encode()).hexdigest()}"
    d = STATE["dedupe"].get(key)
    if d is not None and now - d["t"] < 300:
        return ok(MsgTime=int(d["t"]), MsgSeq=d["seq"]), True
    g.setdefault("seq", 0)
    g["seq"] += 1
    STATE["dedupe"][key] = {"t": now, "seq": g["seq"]}
    data = body[0].get("MsgContent", {}).get("Data") if body[0].get("MsgType") == \
        "TIMCustomElem" else None
    STATE["messages"].append({"GroupId": gid, "MsgSeq": g["seq"], "Random": rnd,
                              "MsgPriority": b.get("MsgPriority", "Normal"), "Data": data,
                              "Desc": body[0].get("MsgContent", {}).get("Desc"), "t": now})
    return ok(MsgTime=int(now), MsgSeq=g["seq"])


def api_add_group_member(b, now):
    g = STATE["groups"].get(b.get("GroupId"))
    if g is None:
        return fail(10010, "group not found")
    if is_av(g):
        return fail(10007, "AVChatRoom does not support add_group_member")
    res = []
    for m in b.get("MemberList", []):
        a = m.get("Member_Account")
        if a in g["members"]:
            res.append({"Member_Account": a, "Result": 2})
        else:
            g["members"].append(a)
            res.append({"Member_Account": a, "Result": 1})
    return ok(MemberList=res)


def api_delete_group_member(b, now):
    g = STATE["groups"].get(b.get("GroupId"))
    if g is None:
        return fail(10010, "group not found")
    if is_av(g):
        return fail(10004, "AVChatRoom does not support delete_group_member")
    for a in b.get("MemberToDel_Account", []):
        if a in g["members"]:
            g["members"].remove(a)
    return ok()


def api_forbid_send_msg(b, now):
    g = STATE["groups"].get(b.get("GroupId"))
    if g is None:
        return fail(10010, "group not found")
    if g["Type"] == "Private":
        return fail(10007, "Private groups cannot mute")
    for a in b.get("Members_Account", []):
        g["muted"][a] = now + int(b.get("ShutUpTime", 0))
    return ok()


def api_ban_group_member(b, now):
    g = STATE["groups"].get(b.get("GroupId"))
    if g is None:
        return fail(10010, "group not found")
    if not is_av(g):
        return fail(10007, "only AVChatRoom can ban")
    for a in b.get("Members_Account", []):
        g["banned"][a] = now + int(b.get("Duration", 0))
    return ok()


def api_sendmsg(b, now):
    body = b.get("MsgBody")
    if not isinstance(b.get("MsgRandom"), int) or not b.get("To_Account") or not body:
        return fail(90001, "invalid request")
    content = json.dumps(body, sort_keys=True, ensure_ascii=False).encode()
    key = f"{b.get('From_Account', ARGS.admin)}|{b.get('MsgSeq')}|{b['MsgRandom']}|" \
          f"{zlib.crc32(content)}"
    d = STATE["c2c_dedupe"].get(key)
    if d is not None and now - d < 120:
        return ok(MsgTime=int(now), MsgKey=key), True
    STATE["c2c_dedupe"][key] = now
    STATE["c2c"].append({"To_Account": b["To_Account"], "MsgRandom": b["MsgRandom"],
                         "MsgSeq": b.get("MsgSeq"), "Data":
                         body[0].get("MsgContent", {}).get("Data"), "t": now})
    return ok(MsgTime=int(now), MsgKey=key)


APIS = {
    "group_open_http_svc/create_group": api_create_group,
    "group_open_http_svc/get_group_info": api_get_group_info,
    "group_open_http_svc/destroy_group": api_destroy_group,
    "group_open_http_svc/send_group_msg": api_send_group_msg,
    "group_open_http_svc/add_group_member": api_add_group_member,
    "group_open_http_svc/delete_group_member": api_delete_group_member,
    "group_open_http_svc/forbid_send_msg": api_forbid_send_msg,
    "group_open_http_svc/ban_group_member": api_ban_group_member,
    "openim/sendmsg": api_sendmsg,
}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as IM does

    def log_message(self, fmt, *a):
        pass

    def reply(self, obj, status=200):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        with LOCK:
            if self.path == "/_calls":
                return self.reply(STATE["calls"])
            if self.path == "/_state":
                return self.reply({k: STATE[k] for k in ("groups", "messages", "c2c")})
        self.reply({"error": "no such path"}, 404)

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(n)
        u = urllib.parse.urlsplit(self.path)
        if u.path == "/_control":
            return self.control(json.loads(raw or b"{}"))
        if not u.path.startswith("/v4/"):
            return self.reply({"error": "no such path"}, 404)
        api = u.path[4:]
        q = dict(urllib.parse.parse_qsl(u.query))
        now = time.time()
        delay = 0
        with LOCK:
            rec = {"api": api.split("/")[-1], "t": now, "dup": False}
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            rec["body"] = body
            why = verify_usersig(q.get("usersig", ""), ARGS.secret, ARGS.sdkappid,
                                 ARGS.admin, now)
            rec["sig_ok"] = why is None
            st = take("http_status", rec["api"], body)
            if st is not None:
                rec["code"] = -st["status"]
                STATE["calls"].append(rec)
                save()
                return self.reply({"error": "scripted"}, st["status"])
            if q.get("sdkappid") != str(ARGS.sdkappid):
                resp = fail(70014, "sdkappid in the query does not match")
            elif q.get("identifier") != ARGS.admin:
                resp = fail(60010, "identifier is not an App admin")
            elif q.get("contenttype") != "json" or not q.get("random", "").isdigit() or \
                    int(q["random"]) > 0xFFFFFFFF:
                resp = fail(60002, "bad query: contenttype/random")
            elif why is not None:
                resp = fail(70052, f"UserSig invalid: {why}")
            elif api not in APIS:
                resp = fail(60002, f"unknown API {api}")
            elif not isinstance(body, dict):
                resp = fail(60003, "body is not a JSON object")
            else:
                f = take("fail", rec["api"], body)
                limited = over_limit(rec["api"], body, now) if f is None else None
                if limited is not None:
                    resp = limited
                elif f is not None:
                    resp = fail(f["code"], f.get("info", "scripted error"))
                else:
                    resp = APIS[api](body, now)
                    if isinstance(resp, tuple):
                        resp, rec["dup"] = resp
            rec["code"] = resp["ErrorCode"]
            STATE["calls"].append(rec)
            save()
            s = take("slow", rec["api"], body)
            if s is not None:
                delay = s["ms"] / 1000.0
        if delay:
            time.sleep(delay)
        try:
            self.reply(resp)
        except OSError:
            pass  # the client gave up (timeout): IM did the work anyway

    def control(self, c):
        with LOCK:
            if c.get("reset"):
                for k in SCRIPT:
                    SCRIPT[k].clear()
                LIMITS.update(per_api=0, per_group=0)
            if "limits" in c:
                LIMITS.update(c["limits"])
            for k in ("fail", "http_status", "slow"):
                if k in c:
                    e = dict(c[k])
                    if "for_ms" in e:
                        e["until"] = time.time() + e["for_ms"] / 1000.0
                    SCRIPT[k].append(e)
        self.reply({"ok": True})


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--sdkappid", type=int, required=True)
    p.add_argument("--admin", default="administrator")
    p.add_argument("--state", required=True)
    ARGS = p.parse_args()
    ARGS.secret = os.environ.get("IM_STANDIN_SECRET", "")
    if not ARGS.secret:
        sys.exit("IM_STANDIN_SECRET is empty")
    load()

    def on_term(signum, frame):
        with LOCK:
            write_state()
        os._exit(0)
    signal.signal(signal.SIGTERM, on_term)
    threading.Thread(target=flusher, daemon=True).start()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler)
    srv.daemon_threads = True
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(ARGS.cert, ARGS.key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    print(f"im_standin listening on 127.0.0.1:{ARGS.port}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
