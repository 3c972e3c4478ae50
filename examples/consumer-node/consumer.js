#!/usr/bin/env node
// SPDX-License-Identifier: Apache-2.0
// consumer-node: an example consumer of roomd's outbox stream in Node.js (npm nats +
// protobufjs), the contract of docs/consumers.md; the same behaviour as examples/consumer-go.
// It reads <namespace>hyapp_room_outbox through a durable pull consumer, decodes each
// message's roomd.v1.RoomOutboxEvent and its payload (the message named by event_type, from
// proto/room_events.proto loaded at start), and applies each event once, in its room's order:
//   - dedupe by event_id (= the Nats-Msg-Id header): seen before -> ack, no effect;
//   - order by room_seq: beyond the room's mark + 1 -> held (nak 250 ms) for up to 8
//     deliveries, then applied anyway;
//   - the effect and the dedupe state are one write: a JSON line appended to --out, read back
//     at start (a real consumer commits its effect and the event_id in one transaction);
//   - then ack (waiting for the server's confirmation). A message that does not decode is
//     a poison: term (a real consumer would first publish it to its dead-letter subject).
// --crash-after N exits (status 3) after the Nth effect before its ack: a crash between
// effect and ack, which JetStream answers with a redelivery after --ack-wait-ms.
"use strict";
const fs = require("fs");
const path = require("path");
const { connect, AckPolicy, DeliverPolicy, nanos } = require("nats");
const protobuf = require("protobufjs");

function args() {
    const a = { url: "nats://127.0.0.1:4222", namespace: "", durable: "example-node",
        out: "effects.jsonl", proto: path.join(__dirname, "..", "..", "proto", "room_events.proto"),
        "ack-wait-ms": 30000, "crash-after": 0 };
    const argv = process.argv.slice(2);
    for (let i = 0; i < argv.length; i += 2) {
        const k = argv[i].replace(/^--/, "");
        if (!(k in a) || i + 1 >= argv.length) {
            console.error(`usage: consumer.js [--${Object.keys(a).join(" V] [--")} V]`);
            process.exit(2);
        }
        a[k] = typeof a[k] === "number" ? Number(argv[i + 1]) : argv[i + 1];
    }
    return a;
}

function loadState(file) {
    const seen = new Set();
    const marks = new Map(); // "app_code/room_id" -> highest room_seq applied
    if (fs.existsSync(file)) {
        for (const line of fs.readFileSync(file, "utf8").split("\n")) {
            let e;
            try { e = JSON.parse(line); } catch { continue; } // torn by a crash: comes again
            seen.add(e.event_id);
            const key = `${e.app_code}/${e.room_id}`;
            if (e.room_seq > (marks.get(key) || 0)) marks.set(key, e.room_seq);
        }
    }
    return { seen, marks };
}

async function main() {
    const a = args();
    const root = new protobuf.Root().loadSync(a.proto, { keepCase: true }); // field names as in the .proto
    const Envelope = root.lookupType("roomd.v1.RoomOutboxEvent");
    const { seen, marks } = loadState(a.out);
    const out = fs.openSync(a.out, "a");
    // the stream name: namespace + topic, characters outside [A-Za-z0-9_-] as "_" (docs/bus.md)
    const stream = (a.namespace + "hyapp_room_outbox").replace(/[^A-Za-z0-9_-]/g, "_");
    const nc = await connect({ servers: a.url, maxReconnectAttempts: -1, name: a.durable });
    const jsm = await nc.jetstreamManager();
    try {
        await jsm.consumers.info(stream, a.durable);
    } catch {
        await jsm.consumers.add(stream, { durable_name: a.durable, ack_policy: AckPolicy.Explicit,
            deliver_policy: DeliverPolicy.All, ack_wait: nanos(a["ack-wait-ms"]),
            filter_subject: a.namespace + "hyapp_room_outbox.*" });
    }
    const consumer = await nc.jetstream().consumers.get(stream, a.durable);
    let stopping = false;
    for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => { stopping = true; });
    console.error(`consuming ${stream} as ${a.durable} (${seen.size} events applied before)`);
    let effects = 0;
    while (!stopping) {
        const batch = await consumer.fetch({ max_messages: 16, expires: 1000 });
        for await (const m of batch) {
            let ev;
            try {
                ev = Envelope.toObject(Envelope.decode(m.data), { longs: Number, bytes: Buffer });
            } catch (err) {
                console.error(`poison message on ${m.subject}: ${err.message}`);
                m.term();
                continue;
            }
            const id = m.headers && m.headers.get("Nats-Msg-Id");
            if (id && id !== ev.event_id) console.error(`Nats-Msg-Id ${id} is not ${ev.event_id}`);
            if (seen.has(ev.event_id)) {
                await m.ackAck(); // a duplicate: done before, no second effect
                continue;
            }
            const key = `${ev.app_code}/${ev.room_id}`;
            const seq = ev.room_seq || 0;
            if (seq > (marks.get(key) || 0) + 1 && m.info.deliveryCount < 8) {
                m.nak(250); // an earlier event of the room first
                continue;
            }
            const line = { event_id: ev.event_id, app_code: ev.app_code, room_id: ev.room_id,
                room_seq: seq, room_version: ev.room_version || 0, event_type: ev.event_type,
                payload: payload(root, ev.event_type, ev.payload), deliveries: m.info.deliveryCount };
            fs.writeSync(out, JSON.stringify(line) + "\n");
            seen.add(ev.event_id);
            if (seq > (marks.get(key) || 0)) marks.set(key, seq);
            effects++;
            if (a["crash-after"] > 0 && effects === a["crash-after"]) {
                console.error(`crash after ${effects} effects, before the ack of ${ev.event_id}`);
                process.exit(3);
            }
            await m.ackAck();
        }
    }
    await nc.drain();
}

// The packed message named by eventType ("RoomGiftSent" -> roomd.v1.RoomGiftSent) as an
// object; a type this build does not know stays {unknown_type: true} (types are added).
function payload(root, eventType, raw) {
    let T;
    try { T = root.lookupType("roomd.v1." + eventType); } catch { return { unknown_type: true }; }
    try {
        return T.toObject(T.decode(raw || Buffer.alloc(0)), { longs: Number, defaults: true });
    } catch {
        return { undecodable: true };
    }
}

main().catch((err) => { console.error(err); process.exit(1); });
