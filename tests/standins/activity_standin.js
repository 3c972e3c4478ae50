#!/usr/bin/env node
// SPDX-License-Identifier: Apache-2.0
// activity_standin.js: the activity-service stand-in for roomd's tests. A real gRPC server
// (@grpc/grpc-js + @grpc/proto-loader, installed by scripts/deps.sh into ./node_modules)
// implementing activity.v1.RoomEventService/Consume from proto/activity.proto.
// Each call is recorded; an event_id seen before answers OK with duplicate=true.
// A plain HTTP control port scripts failures and reads the record:
//   GET  /calls                  [{event_id, event_type, room_id, app_code, status, duplicate, t}]
//   POST /fail  {"code": 14, "count": 2, "details": ".."}   next calls fail with that status
//   POST /slow  {"ms": 3000, "count": 1}                     next calls answer late
//   POST /reset                                              drops scripted failures
// "Down" is the test stopping this process. Usage:
//   node activity_standin.js --port P --control-port C --proto-dir DIR [--record FILE]
'use strict';
const fs = require('fs');
const { arg, loadProto, serve, control, grpc } = require('./grpc_standin');

const recordFile = arg('record', '');
const proto = loadProto('activity.proto');

let calls = [];
if (recordFile && fs.existsSync(recordFile)) {
  calls = fs.readFileSync(recordFile, 'utf8').split('\n').filter(Boolean).map(JSON.parse);
}
const seen = new Set(calls.filter((c) => c.status === 0).map((c) => c.event_id));
const fails = [];
const slows = [];

function record(c) {
  calls.push(c);
  if (recordFile) fs.appendFileSync(recordFile, JSON.stringify(c) + '\n');
}

function consume(call, callback) {
  const ev = call.request;
  const c = {
    event_id: ev.event_id, event_type: ev.event_type, room_id: ev.room_id,
    app_code: ev.app_code, room_version: ev.room_version, payload_len: ev.payload.length,
    t: Date.now() / 1000, status: 0, duplicate: false,
  };
  const answer = () => {
    if (fails.length > 0) {
      const f = fails[0];
      if (--f.count <= 0) fails.shift();
      c.status = f.code;
      record(c);
      return callback({ code: f.code, details: f.details || 'scripted failure' });
    }
    if (!ev.event_id || !ev.event_type) {
      c.status = grpc.status.INVALID_ARGUMENT;
      record(c);
      return callback({ code: grpc.status.INVALID_ARGUMENT, details: 'event_id and event_type are required' });
    }
    c.duplicate = seen.has(ev.event_id);
    seen.add(ev.event_id);
    record(c);
    callback(null, { duplicate: c.duplicate });
  };
  if (slows.length > 0) {
    const s = slows[0];
    if (--s.count <= 0) slows.shift();
    setTimeout(answer, s.ms);
  } else {
    answer();
  }
}

serve('activity_standin', proto.activity.v1.RoomEventService.service, { Consume: consume },
  Number(arg('port')));
control(Number(arg('control-port')), {
  'GET /calls': () => calls,
  '/fail': (j) => { fails.push({ code: j.code, count: j.count || 1, details: j.details }); },
  '/slow': (j) => { slows.push({ ms: j.ms, count: j.count || 1 }); },
  '/reset': () => { fails.length = 0; slows.length = 0; },
});
