// SPDX-License-Identifier: Apache-2.0
// console_test.js: drives roomd's web console in headless Chromium (playwright-core and
// Debian's /usr/bin/chromium), as tests/integ/test_console.py asks: log in with the admin
// token, filter the dead letters of one room, open a row, replay them behind the dry-run
// confirmation, wait for the audit entry, save a screenshot. Prints one JSON line with what
// it saw; exits 1 on any failure.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { chromium } = require(path.join(__dirname, '..', 'standins', 'node_modules', 'playwright-core'));

const URL = process.env.CONSOLE_URL;
const TOKEN = process.env.CONSOLE_TOKEN;
const ROOM = process.env.CONSOLE_ROOM;
const EXPECT = Number(process.env.CONSOLE_EXPECT);
const SHOT = process.env.CONSOLE_SCREENSHOT;

// CONSOLE_MODE=dlq (tests/integ/test_dlq_cluster.py): the consumer dead letters' table lists
// CONSOLE_EXPECT messages; the replay button of the one with seq CONSOLE_SEQ replays it into its
// group, the row leaves the table and the audit's newest entry is the dlq_replay.
async function dlqReplay(page, out) {
  const seq = process.env.CONSOLE_SEQ;
  await page.waitForFunction((n) => document.querySelectorAll('#dlq tbody tr').length === n, EXPECT);
  out.dlq_shown = await page.$$eval('#dlq tbody tr', (r) => r.map((t) => Number(t.dataset.seq)));
  await page.click(`#dlq tbody tr[data-seq="${seq}"] button.dlq-replay`);
  await page.waitForFunction((s) => !document.querySelector(`#dlq tbody tr[data-seq="${s}"]`), seq);
  out.dlq_left = await page.$$eval('#dlq tbody tr', (r) => r.map((t) => Number(t.dataset.seq)));
  await page.waitForFunction(() => {
    const td = document.querySelector('#audit tbody tr:first-child td:nth-child(4)');
    return td && td.textContent === 'dlq_replay';
  });
  const cells = await page.$$eval('#audit tbody tr:first-child td', (t) => t.map((x) => x.textContent));
  out.audit = { id: Number(cells[0]), action: cells[3], filter: JSON.parse(cells[4]), count: Number(cells[5]) };
  await page.screenshot({ path: SHOT, fullPage: true });
}

// CONSOLE_MODE=dlq-discard (test_dlq_cluster.py): the discard button of dead letter CONSOLE_SEQ
// asks first. Dismissed, nothing is discarded (the row stays, the API still has the dead
// letter); accepted, the row leaves the table and the audit's newest entry is the dlq_discard,
// its token column naming the token's owner.
async function dlqDiscard(page, out) {
  const seq = process.env.CONSOLE_SEQ;
  const btn = `#dlq tbody tr[data-seq="${seq}"] button.dlq-discard`;
  await page.waitForFunction((n) => document.querySelectorAll('#dlq tbody tr').length === n, EXPECT);
  out.dlq_shown = await page.$$eval('#dlq tbody tr', (r) => r.map((t) => Number(t.dataset.seq)));
  page.once('dialog', (d) => { out.dismissed_prompt = d.message(); d.dismiss(); });
  await page.click(btn);
  out.after_dismiss = {
    row: await page.$(`#dlq tbody tr[data-seq="${seq}"]`) !== null,
    api: await page.evaluate(async ([s, t]) => (await fetch('/admin/v1/dlq/' + s, { headers: { Authorization: 'Bearer ' + t } })).status, [seq, TOKEN]),
  };
  page.once('dialog', (d) => { out.accepted_prompt = d.message(); d.accept(); });
  await page.click(btn);
  await page.waitForFunction((s) => !document.querySelector(`#dlq tbody tr[data-seq="${s}"]`), seq);
  out.dlq_left = await page.$$eval('#dlq tbody tr', (r) => r.map((t) => Number(t.dataset.seq)));
  await page.waitForFunction(() => {
    const td = document.querySelector('#audit tbody tr:first-child td:nth-child(4)');
    return td && td.textContent === 'dlq_discard';
  });
  const cells = await page.$$eval('#audit tbody tr:first-child td', (t) => t.map((x) => x.textContent));
  out.audit = { id: Number(cells[0]), token: cells[1], action: cells[3], filter: JSON.parse(cells[4]), count: Number(cells[5]) };
  out.status_line = await page.textContent('#status-line');
  await page.screenshot({ path: SHOT, fullPage: true });
}

// CONSOLE_MODE=nodes (test_cluster_nodes.py): at 1280 and 360 px the nodes view lists the
// nodes of CONSOLE_NODES ({node_id: state}) in those states (it refreshes by itself: a node
// killed meanwhile turns unreachable or missing), and the page does not scroll sideways.
async function nodes(page, out) {
  const want = JSON.parse(process.env.CONSOLE_NODES);
  out.widths = {};
  for (const width of [1280, 360]) {
    await page.setViewportSize({ width, height: 900 });
    await page.waitForFunction((w) => Object.entries(w).every(([id, st]) => {
      const tr = document.querySelector(`#nodes tbody tr[data-node="${id}"]`);
      return tr && st.split('|').includes(tr.dataset.state);
    }) && document.querySelectorAll('#nodes tbody tr').length === Object.keys(w).length, want, { timeout: 20000 });
    out.widths[width] = await page.evaluate(() => ({
      overflow: document.documentElement.scrollWidth - window.innerWidth,
      nav: [...document.querySelectorAll('#views a')].map((a) => a.textContent),
      note: document.querySelector('#nodes-note').textContent,
      rows: [...document.querySelectorAll('#nodes tbody tr')].map((tr) => ({
        node: tr.dataset.node, state: tr.dataset.state, cells: [...tr.children].map((t) => t.textContent),
      })),
    }));
    await page.screenshot({ path: SHOT.replace('.png', '-' + width + '.png'), fullPage: true });
  }
}

// CONSOLE_MODE=views (test_console.test_console_views): at 1280 and 360 px wide, every view
// (charts, consumer groups, nodes, overview, dead letters, audit) shows its content, the page
// does not scroll sideways, "updated N s ago" ticks, and the charts draw from the polling.
async function views(page, out) {
  const group = process.env.CONSOLE_GROUP;
  out.widths = {};
  for (const width of [1280, 360]) {
    await page.setViewportSize({ width, height: 900 });
    await page.waitForSelector(`#groups tbody tr[data-group="${group}"]`);
    await page.waitForSelector('#node-checks tbody tr[data-check="store"]');
    await page.waitForSelector('#nodes tbody tr[data-node]');
    // two samples at least: the first load and one 5 s poll
    await page.waitForFunction(() => document.querySelectorAll('#charts svg polyline').length === 4, null, { timeout: 20000 });
    await page.waitForFunction(() => /^updated \d+ s ago$/.test(document.querySelector('#updated').textContent));
    // the outbox rows of every status, the audit entry and the gift the test made
    await page.selectOption('#f-status', '');
    await page.click('#apply-filter');
    await page.waitForSelector('#rows tbody tr');
    await page.waitForSelector('#audit tbody tr');
    await page.waitForSelector('#gifts tbody tr');
    const w = await page.evaluate(() => ({
      // every section fits the viewport's width (it scrolls inside itself, not the page)
      sections_right: Math.max(...[...document.querySelectorAll('main > section, header, nav')].map((x) => x.getBoundingClientRect().right)) - window.innerWidth,
      rows: [...document.querySelectorAll('#rows tbody tr td:nth-child(3)')].map((t) => t.textContent),
      audit_first: [...document.querySelectorAll('#audit tbody tr:first-child td')].map((t) => t.textContent),
      dlq_rows: document.querySelectorAll('#dlq tbody tr').length,
      dlq_note: document.querySelector('#dlq-note').textContent,
      gifts: [...document.querySelectorAll('#gifts tbody tr td:first-child')].map((t) => t.textContent),
      gift_note: document.querySelector('#g-note').textContent,
      overflow: document.documentElement.scrollWidth - window.innerWidth,
      nav: [...document.querySelectorAll('#views a')].map((a) => a.textContent),
      group_cells: [...document.querySelectorAll('#groups tbody tr:first-child td')].map((t) => t.textContent),
      node: document.querySelector('#node-status').textContent,
      checks: [...document.querySelectorAll('#node-checks tbody tr')].map((t) => t.dataset.check),
      lag_now: document.querySelector('#c-lag-now').textContent,
      backlog_now: document.querySelector('#c-backlog-now').textContent,
      updated: document.querySelector('#updated').textContent,
      status_rows: document.querySelectorAll('#status-counts tbody tr').length,
      nodes: [...document.querySelectorAll('#nodes tbody tr')].map((tr) => ({
        node: tr.dataset.node, state: tr.dataset.state, cells: [...tr.children].map((t) => t.textContent),
      })),
    }));
    out.widths[width] = w;
    await page.screenshot({ path: SHOT.replace('.png', '-' + width + '.png'), fullPage: true });
  }
}

(async () => {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'roomd-chromium-'));
  const ctx = await chromium.launchPersistentContext(profile, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1400, height: 1000 },
  });
  const out = {};
  try {
    const page = await ctx.newPage();
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    await page.goto(URL);
    // without the token the API refuses: the page says so
    await page.waitForFunction(() => document.querySelector('#status-line').textContent.includes('unauthenticated'));
    await page.fill('#token', TOKEN);
    await page.click('#save-token');
    if (process.env.CONSOLE_MODE === 'views') {
      await views(page, out);
      out.page_errors = errors;
      console.log(JSON.stringify(out));
      return;
    }
    if (process.env.CONSOLE_MODE === 'nodes' || process.env.CONSOLE_MODE === 'dlq-discard') {
      await (process.env.CONSOLE_MODE === 'nodes' ? nodes : dlqDiscard)(page, out);
      out.page_errors = errors;
      console.log(JSON.stringify(out));
      return;
    }
    if (process.env.CONSOLE_MODE === 'dlq') {
      await dlqReplay(page, out);
      out.page_errors = errors;
      console.log(JSON.stringify(out));
      return;
    }
    await page.waitForSelector('#status-counts tbody tr[data-status="failed"]');
    out.failed_shown = Number(await page.textContent('#status-counts tbody tr[data-status="failed"] td:nth-child(2)'));

    // filter: the failed rows of one room
    await page.selectOption('#f-status', 'failed');
    await page.fill('#f-room', ROOM);
    await page.click('#apply-filter');
    await page.waitForFunction((n) => document.querySelectorAll('#rows tbody tr').length === n, EXPECT);
    const rooms = await page.$$eval('#rows tbody tr td:nth-child(4)', (tds) => tds.map((t) => t.textContent));
    out.rows = rooms.length;
    out.rooms_ok = rooms.every((r) => r.endsWith('/' + ROOM));

    // one row in full
    const first = await page.getAttribute('#rows tbody tr', 'data-event-id');
    await page.click('#rows tbody tr');
    await page.waitForFunction((id) => document.querySelector('#detail').textContent.includes(id), first);
    const detail = JSON.parse(await page.textContent('#detail'));
    out.detail_status = detail.status;
    out.detail_event_id = detail.event && detail.event.event_id;
    out.detail_room_seq = detail.event && detail.event.room_seq;

    // bulk replay behind the dry run: the dialog shows the count first
    await page.click('#replay-btn');
    await page.waitForSelector('#confirm[open]');
    out.confirm_count = Number(await page.textContent('#confirm-count'));
    out.confirm_sample = await page.$$eval('#confirm-sample li', (l) => l.length);
    await page.click('#confirm-go');
    await page.waitForFunction(() => document.querySelector('#replay-result').textContent.startsWith('replayed'));
    out.result = await page.textContent('#replay-result');

    // the audit log shows who replayed what
    await page.waitForSelector('#audit tbody tr');
    const cells = await page.$$eval('#audit tbody tr:first-child td', (t) => t.map((x) => x.textContent));
    out.audit = { id: Number(cells[0]), token: cells[1], action: cells[3], filter: JSON.parse(cells[4]), count: Number(cells[5]), state: cells[6] };
    await page.click('#audit tbody tr:first-child');
    await page.waitForFunction(() => document.querySelector('#audit tbody tr:first-child td.ids').textContent.includes('-'));
    out.audit_ids = (await page.textContent('#audit tbody tr:first-child td.ids')).split('\n').filter(Boolean);

    await page.screenshot({ path: SHOT, fullPage: true });
    out.page_errors = errors;
    console.log(JSON.stringify(out));
  } finally {
    await ctx.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
})().catch((e) => { console.error(e); process.exit(1); });
