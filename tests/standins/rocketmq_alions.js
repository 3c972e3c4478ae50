#!/usr/bin/env node
// SPDX-License-Identifier: Apache-2.0
// rocketmq_alions.js: the npm package ali-ons (an independent Node client of
// RocketMQ's remoting protocol) as a producer and a clustering push consumer,
// to check the stand-in broker (rocketmq_standin.py) and roomd's producer.
//
//   node rocketmq_alions.js produce <nameSrv> <topic> <json [{tags,keys,body(base64)}...]>
//        -> one JSON line per message: {msgId, queueId, queueOffset, sendStatus}
//   node rocketmq_alions.js consume <nameSrv> <group> <topic> <tags> <count> <seconds>
//        [retry=N] [maxReconsume=M] [until=R]
//        -> consumes until count messages were handled or seconds passed; a message is
//           failed (thrown: reconsume later) while its reconsumeTimes < N (N = -1: always);
//           prints one JSON line per delivery {topic, tags, keys, body, reconsumeTimes,
//           queueId, queueOffset}; until=R also ends at a delivery with reconsumeTimes >= R
//   Options from the environment: ONS_ACCESS_KEY / ONS_SECRET_KEY (ACL),
//   ONS_NAMESPACE. Exit 1 with the error on stderr when a send fails.
'use strict';

const { Producer, Consumer, Message } = require('ali-ons');

const nohttp = { request: async () => { throw new Error('no onsAddr lookups in tests'); } };
const quiet = { info() {}, warn() {}, debug() {}, error() {} };

function common(nameSrv) {
  const o = { httpclient: nohttp, nameSrv: nameSrv.split(','), logger: quiet };
  if (process.env.ONS_ACCESS_KEY) {
    o.accessKey = process.env.ONS_ACCESS_KEY;
    o.secretKey = process.env.ONS_SECRET_KEY;
  }
  if (process.env.ONS_NAMESPACE) o.namespace = process.env.ONS_NAMESPACE;
  return o;
}

async function produce(nameSrv, topic, list) {
  const p = new Producer(Object.assign(common(nameSrv), {
    producerGroup: 'alions-check-producer', retryTimesWhenSendFailed: 0, sendMsgTimeout: 3000,
  }));
  p.on('error', () => {});
  await p.ready();
  try {
    for (const m of JSON.parse(list)) {
      const msg = new Message(topic, m.tags || '', Buffer.from(m.body || '', 'base64'));
      if (m.keys) msg.keys = m.keys;
      if (m.delayLevel) msg.delayTimeLevel = m.delayLevel;
      const r = await p.send(msg);
      console.log(JSON.stringify({ msgId: r.msgId, queueId: r.messageQueue.queueId,
        queueOffset: r.queueOffset, sendStatus: r.sendStatus }));
    }
  } finally {
    await p.close();
  }
}

async function consume(nameSrv, group, topic, tags, count, seconds, rest) {
  const opt = Object.fromEntries(rest.map(a => a.split('=')));
  const retryBelow = Number(opt.retry || 0);
  const c = new Consumer(Object.assign(common(nameSrv), {
    consumerGroup: group, maxReconsumeTimes: Number(opt.maxReconsume || 16),
    persistConsumerOffsetInterval: 500, rebalanceInterval: 1000,
    brokerSuspendMaxTimeMillis: 1000, consumerTimeoutMillisWhenSuspend: 5000,
    consumeFromWhere: 'CONSUME_FROM_LAST_OFFSET',
  }));
  let handled = 0;
  let done;
  const finished = new Promise(resolve => { done = resolve; });
  c.on('error', e => { if (process.env.ONS_DEBUG) console.error(String(e)); });
  c.subscribe(topic, tags, async msg => {
    const again = retryBelow < 0 || msg.reconsumeTimes < retryBelow;
    console.log(JSON.stringify({ at: Date.now(), topic: msg.topic, tags: msg.tags, keys: msg.keys,
      body: msg.body.toString('base64'), reconsumeTimes: msg.reconsumeTimes,
      queueId: msg.queueId, queueOffset: msg.queueOffset, retry: again,
      properties: msg.properties }));
    // thrown, not ACTION_RETRY: ali-ons drops the value its %RETRY% handler's wrapper gets
    if (opt.until !== undefined && msg.reconsumeTimes >= Number(opt.until)) done();
    if (again) throw new Error('scripted failure (reconsume later)');
    if (++handled >= count) done();
    return undefined;
  });
  await c.ready();
  const timer = setTimeout(done, seconds * 1000);
  await finished;
  clearTimeout(timer);
  await new Promise(r => setTimeout(r, 700)); // the offset persist interval
  await c.close();
}

(async () => {
  const [cmd, ...a] = process.argv.slice(2);
  if (cmd === 'produce') await produce(a[0], a[1], a[2]);
  else if (cmd === 'consume') await consume(a[0], a[1], a[2], a[3], Number(a[4]), Number(a[5]), a.slice(6));
  else throw new Error('usage: produce|consume ...');
  process.exit(0);
})().catch(e => { console.error(String(e && e.stack || e)); process.exit(1); });
