#!/usr/bin/env node
// SPDX-License-Identifier: Apache-2.0
// wallet_standin.js: a wallet service for roomd's tests (wallet.driver: grpc). A real gRPC
// server (@grpc/grpc-js + @grpc/proto-loader) implementing wallet.v1.WalletService from
// proto/wallet.proto as docs/wallet.md specifies, with its own durable ledger: every change is
// one JSON line appended and fsynced to --ledger FILE before the call answers, and the file is
// replayed at start-up, so a kill -9 of the stand-in loses nothing it answered.
// A plain HTTP control port reads the state and scripts failures:
//   GET  /state                  {"balances": {"app/uid": n}, "holds": [{...hold, state}]}
//   POST /fail {"method": "Try", "code": 14, "count": 2}   next calls of method fail so
//   POST /reset                                              drops scripted failures
// Usage: node wallet_standin.js --port P --control-port C --proto-dir DIR --ledger FILE
//        [--initial N]   (the balance of a never-seen account, default 0)
'use strict';
const fs = require('fs');
const { arg, loadProto, serve, control, grpc } = require('./grpc_standin');

const ledgerFile = arg('ledger');
const initial = BigInt(arg('initial', '0'));
const proto = loadProto('wallet.proto');

// State: balances by "app/uid" (BigInt, the amount held already taken off) and holds by
// "app/command_id": {app_code, command_id, uid, amount, request_digest, room_id,
// created_at_ms, state: "held" | "confirmed" | "cancelled"}.
const balances = new Map();
const holds = new Map();

function apply(e) {
  if (e.op === 'balance') balances.set(e.key, BigInt(e.balance));
  else if (e.op === 'hold') holds.set(e.key, e.hold);
}

if (fs.existsSync(ledgerFile)) {
  for (const line of fs.readFileSync(ledgerFile, 'utf8').split('\n')) {
    if (!line) continue;
    try { apply(JSON.parse(line)); } catch (_) { /* a torn last line: never answered */ }
  }
}
const fd = fs.openSync(ledgerFile, 'a');

// Writes the entries durably, then applies them (one append + fsync per call).
function commit(entries) {
  fs.writeSync(fd, entries.map((e) => JSON.stringify(e)).join('\n') + '\n');
  fs.fsyncSync(fd);
  entries.forEach(apply);
}

function balanceOf(app, uid) {
  const k = `${app}/${uid}`;
  return balances.has(k) ? balances.get(k) : initial;
}

const fails = [];
function scripted(method) {
  const i = fails.findIndex((f) => f.method === method);
  if (i < 0) return null;
  const f = fails[i];
  if (--f.count <= 0) fails.splice(i, 1);
  return { code: f.code, details: f.details || 'scripted failure' };
}

const err = (code, details) => ({ code, details });

function tryHold(call, cb) {
  const r = call.request;
  const f = scripted('Try');
  if (f) return cb(f);
  const amount = BigInt(r.amount || '0');
  if (!r.app_code || !r.command_id || !(BigInt(r.uid || '0') > 0n) || !(amount > 0n) ||
      !r.request_digest) {
    return cb(err(grpc.status.INVALID_ARGUMENT,
      'app_code, command_id, uid > 0, amount > 0 and request_digest are required'));
  }
  const key = `${r.app_code}/${r.command_id}`;
  const h = holds.get(key);
  const bal = balanceOf(r.app_code, r.uid);
  if (h) {
    if (h.uid !== String(r.uid) || h.amount !== String(amount) ||
        h.request_digest !== r.request_digest) {
      return cb(err(grpc.status.ABORTED, 'idempotency_key_reused'));
    }
    if (h.state === 'cancelled') return cb(err(grpc.status.FAILED_PRECONDITION, 'cancelled'));
    return cb(null, { balance_after: String(bal), replay: true });
  }
  if (bal < amount) return cb(err(grpc.status.FAILED_PRECONDITION, 'insufficient_balance'));
  const hold = {
    app_code: r.app_code, command_id: r.command_id, uid: String(r.uid), amount: String(amount),
    request_digest: r.request_digest, room_id: r.room_id, created_at_ms: Date.now(),
    state: 'held',
  };
  commit([
    { op: 'balance', key: `${r.app_code}/${r.uid}`, balance: String(bal - amount) },
    { op: 'hold', key, hold },
  ]);
  cb(null, { balance_after: String(bal - amount), replay: false });
}

function resolve(method, want) {
  return (call, cb) => {
    const r = call.request;
    const f = scripted(method);
    if (f) return cb(f);
    if (!r.app_code || !r.command_id) {
      return cb(err(grpc.status.INVALID_ARGUMENT, 'app_code and command_id are required'));
    }
    const key = `${r.app_code}/${r.command_id}`;
    const h = holds.get(key);
    if (h && r.request_digest && h.request_digest !== r.request_digest) {
      return cb(err(grpc.status.ABORTED, 'idempotency_key_reused'));
    }
    if (!h) {
      if (want === 'confirmed') return cb(err(grpc.status.NOT_FOUND, 'no such hold'));
      // a Cancel of a key never tried: recorded, so a late Try is refused
      commit([{ op: 'hold', key, hold: {
        app_code: r.app_code, command_id: r.command_id, uid: '0', amount: '0',
        request_digest: '', room_id: '', created_at_ms: Date.now(), state: 'cancelled' } }]);
      return cb(null, { state: 'cancelled' });
    }
    if (h.state === want) return cb(null, { state: want });
    if (h.state !== 'held') return cb(err(grpc.status.FAILED_PRECONDITION, h.state));
    const entries = [{ op: 'hold', key, hold: { ...h, state: want } }];
    if (want === 'cancelled') {
      entries.unshift({ op: 'balance', key: `${h.app_code}/${h.uid}`,
        balance: String(balanceOf(h.app_code, h.uid) + BigInt(h.amount)) });
    }
    commit(entries);
    cb(null, { state: want });
  };
}

function listUnresolved(call, cb) {
  const r = call.request;
  const f = scripted('ListUnresolved');
  if (f) return cb(f);
  const older = Number(r.older_than_ms || '0');
  const limit = r.limit > 0 ? Math.min(r.limit, 1000) : 1000;
  const out = [...holds.values()]
    .filter((h) => h.state === 'held' && h.created_at_ms < older &&
      (!r.app_code || h.app_code === r.app_code))
    .sort((a, b) => a.created_at_ms - b.created_at_ms)
    .slice(0, limit);
  cb(null, { holds: out });
}

serve('wallet_standin', proto.wallet.v1.WalletService.service, {
  Try: tryHold,
  Confirm: resolve('Confirm', 'confirmed'),
  Cancel: resolve('Cancel', 'cancelled'),
  ListUnresolved: listUnresolved,
}, Number(arg('port')));
control(Number(arg('control-port')), {
  'GET /state': () => ({
    balances: Object.fromEntries([...balances].map(([k, v]) => [k, v.toString()])),
    holds: [...holds.values()],
  }),
  '/fail': (j) => { fails.push({ method: j.method, code: j.code, count: j.count || 1, details: j.details }); },
  '/reset': () => { fails.length = 0; },
});
