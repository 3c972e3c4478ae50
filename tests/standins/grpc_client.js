#!/usr/bin/env node
// SPDX-License-Identifier: Apache-2.0
// grpc_client.js: a real gRPC client (@grpc/grpc-js + @grpc/proto-loader) of roomd's
// proto/room_service.proto for the tests (tests/integ/test_grpc.py) and the benchmark.
//
// Calls: reads a JSON array of calls on stdin, makes them one after the other and prints a
// JSON array of results:
//   in:  {"service": "RoomService", "method": "JoinRoom", "request": {...}, (or "path" and
//         "raw_hex" for bytes the proto does not describe)
//         "metadata": {"x-app-code": "a1", "idempotency-key": "k"}, "deadline_ms": 2000}
//   out: {"code": 0, "details": "", "response": {...} | null, "initial": {...},
//         "trailing": {...}, "error_info": {reason, domain, metadata} | null,
//         "bad_request": {field_violations: [...]} | null, "status_code": n | null}
// error_info / bad_request are decoded from the grpc-status-details-bin trailer
// (proto/rpc_status.proto); status_code is the code inside it.
// Usage: node grpc_client.js --target HOST:PORT [--proto-dir DIR] [--ca PEM] [--parallel N]
//        < calls.json
// (--ca: TLS, the server's certificate verified against PEM)
'use strict';
const fs = require('fs');
const path = require('path');
const protobuf = require('protobufjs');
const { arg, protoDir, loadProto, grpc } = require('./grpc_standin');

const target = arg('target');
const roomd = loadProto('room_service.proto', { longs: Number, defaults: false, oneofs: true }).roomd.v1;
const statusRoot = new protobuf.Root().loadSync(path.join(protoDir(), 'rpc_status.proto'), {
  keepCase: true,
});
const RpcStatus = statusRoot.lookupType('google.rpc.Status');
const ErrorInfo = statusRoot.lookupType('google.rpc.ErrorInfo');
const BadRequest = statusRoot.lookupType('google.rpc.BadRequest');

const clients = {};
function client(service) {
  if (!clients[service]) {
    const ca = arg('ca');
    const creds = ca ? grpc.credentials.createSsl(fs.readFileSync(ca))
      : grpc.credentials.createInsecure();
    clients[service] = new roomd[service](target, creds);
  }
  return clients[service];
}

function mdObject(md) {
  const o = {};
  if (!md) return o;
  for (const [k, v] of Object.entries(md.getMap())) {
    o[k] = Buffer.isBuffer(v) ? v.toString('base64') : v;
  }
  return o;
}

function decodeDetails(md) {
  const out = { error_info: null, bad_request: null, status_code: null };
  const raw = md && md.get('grpc-status-details-bin');
  if (!raw || raw.length === 0) return out;
  const st = RpcStatus.decode(raw[0]);
  out.status_code = st.code;
  for (const any of st.details) {
    if (any.type_url.endsWith('/google.rpc.ErrorInfo')) {
      out.error_info = ErrorInfo.toObject(ErrorInfo.decode(any.value), { defaults: true });
    } else if (any.type_url.endsWith('/google.rpc.BadRequest')) {
      out.bad_request = BadRequest.toObject(BadRequest.decode(any.value), { defaults: true });
    }
  }
  return out;
}

// {"path": "/pkg.Svc/M", "raw_hex": "..."}: sends those bytes as the request message (a method
// or a message the proto does not have); the answer comes back as "raw_hex".
function rawCall(p) {
  return function (request, md, opts, cb) {
    return this.makeUnaryRequest(p, (b) => b, (b) => ({ raw_hex: b.toString('hex') }),
      Buffer.from(request.raw_hex || '', 'hex'), md, opts, cb);
  };
}

// {"stream": true, ...}: a server-streaming call (WatchRoom); its messages come back as
// "responses" (in order). "max_messages": cancel the call after that many (code is then
// CANCELLED and "client_cancelled" true); "idle_ms": cancel after no message for that long
// (after the first one, or from the start); "pause_ms" (any call): wait that long first.
function streamCall(c) {
  return new Promise((resolve) => {
    const md = new grpc.Metadata();
    for (const [k, v] of Object.entries(c.metadata || {})) md.set(k, v);
    const opts = c.deadline_ms ? { deadline: new Date(Date.now() + c.deadline_ms) } : {};
    const res = { code: 0, details: '', responses: [], initial: {}, trailing: {},
      client_cancelled: false };
    const cl = client(c.service || 'RoomService');
    const st = cl[c.method](c.request || {}, md, opts);
    let idle = null;
    const arm = () => {
      if (!c.idle_ms) return;
      if (idle) clearTimeout(idle);
      idle = setTimeout(() => { res.client_cancelled = true; st.cancel(); }, c.idle_ms);
    };
    arm();
    st.on('metadata', (m) => { res.initial = mdObject(m); });
    st.on('data', (m) => {
      res.responses.push(m);
      if (c.progress) process.stderr.write(JSON.stringify({ room_seq: m.room_seq }) + '\n');
      arm();
      if (c.max_messages && res.responses.length >= c.max_messages) {
        res.client_cancelled = true;
        st.cancel();
      }
    });
    st.on('error', (err) => {
      res.code = err.code;
      res.details = err.details;
      res.trailing = mdObject(err.metadata);
      Object.assign(res, decodeDetails(err.metadata));
    });
    st.on('status', (s) => {
      if (s.code === 0) res.trailing = mdObject(s.metadata);
      if (idle) clearTimeout(idle);
      setImmediate(() => resolve(res)); // after an 'error' that may follow
    });
  });
}

function call(c) {
  if (c.pause_ms) {
    const { pause_ms, ...rest } = c;
    return new Promise((r) => setTimeout(r, pause_ms)).then(() => call(rest));
  }
  if (c.stream) return streamCall(c);
  return new Promise((resolve) => {
    const md = new grpc.Metadata();
    for (const [k, v] of Object.entries(c.metadata || {})) md.set(k, v);
    const opts = { deadline: new Date(Date.now() + (c.deadline_ms || 5000)) };
    const res = { code: 0, details: '', response: null, initial: {}, trailing: {} };
    const cl = client(c.service || 'RoomService');
    const rpc = c.path ? rawCall(c.path) : cl[c.method];
    if (!rpc) {
      resolve({ ...res, code: -1, details: 'no such method in the proto: ' + c.method });
      return;
    }
    const req = c.path ? { raw_hex: c.raw_hex || '' } : c.request || {};
    const ca = rpc.call(cl, req, md, opts, (err, resp) => {
      if (err) {
        res.code = err.code;
        res.details = err.details;
        res.trailing = mdObject(err.metadata);
        Object.assign(res, decodeDetails(err.metadata));
      } else {
        res.response = resp;
      }
      resolve(res);
    });
    ca.on('metadata', (m) => { res.initial = mdObject(m); });
    ca.on('status', (s) => { if (s.code === 0) res.trailing = mdObject(s.metadata); });
  });
}

async function runCalls() {
  const chunks = [];
  for await (const ch of process.stdin) chunks.push(ch);
  const calls = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  const out = [];
  // --parallel N: N calls in flight at a time on the one channel (one connection), each
  // started as soon as one ends; results in the order of the input
  const par = Number(arg('parallel') || 1);
  let next = 0;
  const lane = async () => {
    while (next < calls.length) {
      const i = next++;
      out[i] = await call(calls[i]);
    }
  };
  await Promise.all(Array.from({ length: par }, lane));
  process.stdout.write(JSON.stringify(out) + '\n');
}

runCalls().then(() => {
  for (const c of Object.values(clients)) c.close();
}).catch((e) => { console.error(e); process.exit(2); });
