#!/usr/bin/env node
// SPDX-License-Identifier: Apache-2.0
// h2_idle.js: a hostile gRPC client for the tests (tests/integ/test_grpc_hardening.py). On ONE
// HTTP/2 connection (Node's http2) it opens --streams calls of --path with their headers
// (content-type application/grpc, te trailers, the --token as authorization when given) and never
// sends a message nor END_STREAM. Once they are sent it makes one real call on its own
// connection (@grpc/grpc-js: GetRoom of --probe-room with --probe-token) and times it. After
// --hold-ms it prints one JSON line and exits:
//   {"sent": n, "answered": k, "codes": {"16": 64}, "last_answer_ms": ms,
//    "probe": {"code": 0, "ms": 12, "details": ""}}
// (an idle stream's code is its grpc-status, or "reset" when the stream was reset without one).
// Usage: node h2_idle.js --target HOST:PORT --streams 64 [--path /roomd.v1.RoomService/GetRoom]
//        [--token T] --probe-room R [--probe-token T] [--hold-ms 3000] [--local-address A]
'use strict';
const http2 = require('http2');
const { arg, loadProto, grpc } = require('./grpc_standin');

const target = arg('target');
const n = Number(arg('streams', '64'));
const path = arg('path', '/roomd.v1.RoomService/GetRoom');
const token = arg('token', '');
const probeToken = arg('probe-token', '');
const holdMs = Number(arg('hold-ms', '3000'));
const t0 = Date.now();
const codes = {};
let answered = 0;
let lastAnswerMs = null;

// --local-address A: the idle connection comes from A (127.0.0.x), the probe from the default
const local = arg('local-address', '');
const session = http2.connect(`http://${target}`, local ? { localAddress: local } : {});
session.on('error', () => {});

function done(code) {
  codes[code] = (codes[code] || 0) + 1;
  answered++;
  lastAnswerMs = Date.now() - t0;
}

for (let i = 0; i < n; i++) {
  const headers = { ':method': 'POST', ':path': path, 'content-type': 'application/grpc',
    te: 'trailers' };
  if (token) headers.authorization = token;
  const req = session.request(headers, { endStream: false });
  let code = null;
  req.on('response', (h) => { if (h['grpc-status'] !== undefined) code = h['grpc-status']; });
  req.on('trailers', (h) => { if (h['grpc-status'] !== undefined) code = h['grpc-status']; });
  req.on('error', () => {});
  req.on('data', () => {});
  req.on('close', () => done(code === null ? 'reset' : String(code)));
}

const probe = { code: null, ms: null, details: '' };
setTimeout(() => {
  const roomd = loadProto('room_service.proto', { longs: Number, defaults: false }).roomd.v1;
  const c = new roomd.RoomService(target, grpc.credentials.createInsecure());
  const md = new grpc.Metadata();
  if (probeToken) md.set('authorization', probeToken);
  const start = Date.now();
  c.GetRoom({ room_id: arg('probe-room') }, md, { deadline: new Date(Date.now() + 10000) },
    (err) => {
      probe.ms = Date.now() - start;
      probe.code = err ? err.code : 0;
      probe.details = err ? err.details : '';
      c.close();
    });
}, 300);

setTimeout(() => {
  process.stdout.write(JSON.stringify({ sent: n, answered, codes, last_answer_ms: lastAnswerMs,
    probe }) + '\n');
  session.destroy();
  process.exit(0);
}, holdMs);
