// SPDX-License-Identifier: Apache-2.0
// console.js: the roomd operator console. Framework-free: it calls the admin API
// (/admin/v1/...) with the token typed in the header, and writes every value with
// textContent (never as HTML).
'use strict';

const $ = (s) => document.querySelector(s);
let token = sessionStorage.getItem('roomd_admin_token') || '';
let nextAfter = null;

async function api(method, path, body) {
  const headers = { 'Content-Type': 'application/json' };
  if (token) headers.Authorization = 'Bearer ' + token;
  const r = await fetch(path, { method, headers, body: body ? JSON.stringify(body) : undefined });
  let j = null;
  try { j = await r.json(); } catch (e) { j = null; }
  if (!r.ok) {
    const msg = j && j.error ? j.error.code + ': ' + j.error.message : 'HTTP ' + r.status;
    throw new Error(msg);
  }
  return j;
}

function say(text, isError) {
  const s = $('#status-line');
  s.textContent = text;
  s.className = isError ? 'error' : '';
}

function cell(tr, text, cls) {
  const td = document.createElement('td');
  td.textContent = text === null || text === undefined ? '-' : String(text);
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

function time(ms) {
  return ms > 0 ? new Date(ms).toISOString() : '-';
}

function msOf(input) {
  return input.value ? String(new Date(input.value).getTime()) : '';
}

// The filter of the form, as the API's keys (only those set).
function filter() {
  const f = {
    status: $('#f-status').value, sink: $('#f-sink').value,
    event_type: $('#f-event-type').value.trim(), room_id: $('#f-room').value.trim(),
    app: $('#f-app').value.trim(), error: $('#f-error').value,
    created_after: msOf($('#f-created-after')), created_before: msOf($('#f-created-before')),
  };
  for (const k of Object.keys(f)) if (!f[k]) delete f[k];
  return f;
}

async function loadSummary() {
  const s = await api('GET', '/admin/v1/outbox/summary');
  const st = $('#status-counts tbody');
  st.replaceChildren();
  for (const [k, v] of Object.entries(s.by_status)) {
    const tr = document.createElement('tr');
    tr.dataset.status = k;
    cell(tr, k); cell(tr, v);
    st.appendChild(tr);
  }
  const sk = $('#sink-table tbody');
  sk.replaceChildren();
  for (const [k, v] of Object.entries(s.sinks)) {
    const tr = document.createElement('tr');
    cell(tr, k); cell(tr, v.undelivered); cell(tr, v.failed); cell(tr, v.oldest_undelivered_s.toFixed(3));
    sk.appendChild(tr);
  }
  $('#oldest').textContent = s.oldest_undelivered_s.toFixed(3);
}

async function loadRows(append) {
  const q = new URLSearchParams(filter());
  q.set('limit', '50');
  if (append && nextAfter !== null) q.set('after', String(nextAfter));
  const res = await api('GET', '/admin/v1/outbox?' + q.toString());
  const tb = $('#rows tbody');
  if (!append) tb.replaceChildren();
  for (const r of res.rows) {
    const tr = document.createElement('tr');
    tr.dataset.eventId = r.event_id;
    cell(tr, r.id); cell(tr, r.event_id); cell(tr, r.event_type);
    cell(tr, r.app_code + '/' + r.room_id); cell(tr, r.status, 'status-' + r.status);
    cell(tr, r.retry_count); cell(tr, time(r.created_at_ms)); cell(tr, r.last_error);
    tr.addEventListener('click', () => show(r.event_id).catch((e) => say(e.message, true)));
    tb.appendChild(tr);
  }
  nextAfter = res.next_after;
  $('#next-page').hidden = nextAfter === null;
  $('#row-count').textContent = tb.children.length + ' rows shown';
}

let shownEventId = null;
async function show(eventId) {
  const r = await api('GET', '/admin/v1/outbox/' + encodeURIComponent(eventId));
  shownEventId = eventId;
  $('#detail').textContent = JSON.stringify(r, null, 2);
}

async function loadAudit() {
  const res = await api('GET', '/admin/v1/audit?limit=50');
  const tb = $('#audit tbody');
  tb.replaceChildren();
  for (const a of res.audits) {
    const tr = document.createElement('tr');
    tr.dataset.auditId = a.id;
    cell(tr, a.id); cell(tr, a.actor); cell(tr, time(a.created_at_ms)); cell(tr, a.action);
    cell(tr, JSON.stringify(a.filter)); cell(tr, a.count); cell(tr, a.state);
    const ids = cell(tr, 'show');
    ids.className = 'ids';
    tr.addEventListener('click', async () => {
      try {
        const d = await api('GET', '/admin/v1/audit/' + a.id);
        ids.textContent = d.rows.map((x) => x.event_id + (x.new_event_id ? ' -> ' + x.new_event_id : '')).join('\n') || '(none)';
      } catch (e) { say(e.message, true); }
    });
    tb.appendChild(tr);
  }
}

// Bulk replay behind a dry-run confirmation.
async function replayAsk() {
  const body = { filter: filter(), dry_run: true, repair: $('#repair').checked, sample: 5 };
  const d = await api('POST', '/admin/v1/outbox/replay', body);
  $('#confirm-count').textContent = String(d.count);
  $('#confirm-filter').textContent = JSON.stringify(d.filter);
  const ul = $('#confirm-sample');
  ul.replaceChildren();
  for (const r of d.sample) {
    const li = document.createElement('li');
    li.textContent = r.event_id + ' ' + r.event_type + ' ' + r.app_code + '/' + r.room_id + ' — ' + (r.last_error || '');
    ul.appendChild(li);
  }
  $('#confirm-go').disabled = d.count === 0;
  $('#confirm').showModal();
}

async function replayGo() {
  $('#confirm').close();
  const body = { filter: filter(), repair: $('#repair').checked };
  const r = await api('POST', '/admin/v1/outbox/replay', body);
  $('#replay-result').textContent = (r.repair ? 'repaired ' : 'replayed ') + r.replayed + ' rows (audit #' + r.audit_id + ')';
  await refresh();
  if (shownEventId) await show(shownEventId); // the row pane shows the row after the action
}

async function loadDlq() {
  const tb = $('#dlq tbody');
  try {
    const res = await api('GET', '/admin/v1/dlq');
    // where they are: JetStream's DLQ stream, or RocketMQ's %DLQ%<group> topics
    $('#dlq-note').textContent = res.note || (res.driver ? 'on ' + res.driver + ': ' + res.stream : '');
    tb.replaceChildren();
    for (const m of res.messages) {
      const tr = document.createElement('tr');
      tr.dataset.seq = m.seq;
      cell(tr, m.seq); cell(tr, m.group); cell(tr, m.event_id); cell(tr, m.event_type);
      cell(tr, m.deliveries);
      cell(tr, m.dead_reason ? m.dead_reason + (m.reason && m.reason !== '-' ? ': ' + m.reason : '') : m.reason);
      const td = cell(tr, '');
      const b = document.createElement('button');
      b.textContent = 'replay into ' + m.group;
      b.className = 'dlq-replay';
      b.addEventListener('click', async (ev) => {
        ev.stopPropagation();
        try {
          await api('POST', '/admin/v1/dlq/' + m.seq + '/replay', {});
          say('message ' + m.seq + ' replayed into ' + m.group);
          await loadDlq();
          await loadAudit();
        } catch (e) { say(e.message, true); }
      });
      td.appendChild(b);
      const d = document.createElement('button');
      d.textContent = 'discard';
      d.className = 'dlq-discard';
      d.addEventListener('click', async (ev) => {
        ev.stopPropagation();
        if (!window.confirm('Discard dead letter ' + m.seq + ' of ' + m.group + ' for good?')) return;
        try {
          await api('POST', '/admin/v1/dlq/' + m.seq + '/discard', {});
          say('dead letter ' + m.seq + ' discarded');
          await loadDlq();
          await loadAudit();
        } catch (e) { say(e.message, true); }
      });
      td.appendChild(d);
      tb.appendChild(tr);
    }
  } catch (e) {
    $('#dlq-note').textContent = e.message;
  }
}

// ---- live views: /metrics (Prometheus text) and /readyz of this node ----

// {name: [{labels: {..}, value}]} of a Prometheus text exposition.
function parseMetrics(text) {
  const out = {};
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$/);
    if (!m) continue;
    const labels = {};
    if (m[3]) for (const kv of m[3].matchAll(/([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"/g)) labels[kv[1]] = kv[2];
    (out[m[1]] = out[m[1]] || []).push({ labels, value: Number(m[4]) });
  }
  return out;
}

function sum(ms, name, pred) {
  return (ms[name] || []).filter((x) => !pred || pred(x.labels)).reduce((a, x) => a + x.value, 0);
}

async function fetchText(path) {
  const headers = token ? { Authorization: 'Bearer ' + token } : {};
  const r = await fetch(path, { headers });
  if (!r.ok) throw new Error(path + ': HTTP ' + r.status);
  return r.text();
}

// One hour of samples, kept in this browser (one per poll).
const HISTORY_MS = 3600 * 1000;
const history = [];
let lastDelivered = null;

function sparkline(svg, key) {
  const pts = history.filter((h) => h[key] !== null);
  svg.replaceChildren();
  if (pts.length < 2) return;
  const t0 = Date.now() - HISTORY_MS;
  const max = Math.max(1, ...pts.map((p) => p[key]));
  const d = pts.map((p) => ((p.t - t0) / HISTORY_MS * 300).toFixed(1) + ',' + (58 - p[key] / max * 56).toFixed(1)).join(' ');
  const pl = document.createElementNS('http://www.w3.org/2000/svg', 'polyline');
  pl.setAttribute('points', d);
  pl.setAttribute('class', 'line');
  svg.appendChild(pl);
}

async function loadMetrics() {
  const ms = parseMetrics(await fetchText('/metrics'));
  const now = Date.now();
  const backlog = sum(ms, 'roomd_outbox_rows', (l) => l.scope !== 'store' && ['pending', 'retryable', 'delivering'].includes(l.status));
  const oldest = sum(ms, 'roomd_outbox_oldest_undelivered_seconds', (l) => l.scope !== 'store');
  const delivered = sum(ms, 'roomd_outbox_delivery_seconds_count');
  const lag = sum(ms, 'roomd_consumer_lag');
  let rate = null;
  const prev = history.length ? history[history.length - 1] : null;
  if (lastDelivered !== null && prev) rate = Math.max(0, (delivered - lastDelivered) / ((now - prev.t) / 1000));
  lastDelivered = delivered;
  history.push({ t: now, backlog, oldest, rate, lag });
  while (history.length && history[0].t < now - HISTORY_MS) history.shift();
  for (const [key, id, v] of [['backlog', 'backlog', backlog], ['oldest', 'oldest', oldest], ['rate', 'rate', rate], ['lag', 'lag', lag]]) {
    sparkline($('#c-' + id), key);
    $('#c-' + id + '-now').textContent = v === null ? '-' : (Number.isInteger(v) ? String(v) : v.toFixed(2));
  }
  // the consumer groups of this node
  const tb = $('#groups tbody');
  tb.replaceChildren();
  const groups = [...new Set((ms.roomd_consumer_handled_total || []).map((x) => x.labels.group))];
  $('#groups-note').textContent = groups.length ? '' : 'no consumer group runs on this node';
  for (const g of groups) {
    const of = (l) => l.group === g;
    const open = sum(ms, 'roomd_consumer_circuit_open', of);
    const tr = document.createElement('tr');
    tr.dataset.group = g;
    cell(tr, g); cell(tr, sum(ms, 'roomd_consumer_lag', of)); cell(tr, sum(ms, 'roomd_consumer_ack_pending', of));
    cell(tr, sum(ms, 'roomd_consumer_oldest_unacked_age_seconds', of).toFixed(1));
    cell(tr, sum(ms, 'roomd_consumer_handled_total', of));
    cell(tr, sum(ms, 'roomd_consumer_retried_total', (l) => of(l) && l.reason === 'failure'));
    cell(tr, sum(ms, 'roomd_consumer_retried_total', (l) => of(l) && (l.reason === 'outage' || l.reason === 'circuit_open')));
    cell(tr, sum(ms, 'roomd_consumer_dead_letters_total', of));
    cell(tr, (ms.roomd_consumer_circuit_open || []).some((x) => x.labels.group === g) ? (open ? 'open' : 'closed') : '-', open ? 'bad' : '');
    tb.appendChild(tr);
  }
}

async function loadNode() {
  const r = await fetch('/readyz', { headers: token ? { Authorization: 'Bearer ' + token } : {} });
  const j = await r.json();
  $('#node-status').textContent = j.status;
  $('#node-status').className = j.status === 'ready' ? 'good' : 'bad';
  const tb = $('#node-checks tbody');
  tb.replaceChildren();
  for (const [k, v] of Object.entries(j.checks || {})) {
    const tr = document.createElement('tr');
    tr.dataset.check = k;
    cell(tr, k); cell(tr, v, v === 'ok' ? 'good' : 'bad');
    tb.appendChild(tr);
  }
}

// The cluster's nodes (GET /admin/v1/nodes): every node the lease store knows, its
// readiness, version and the room leases it holds.
async function loadNodes() {
  const tb = $('#nodes tbody');
  let res;
  try {
    res = await api('GET', '/admin/v1/nodes');
  } catch (e) {
    $('#nodes-note').textContent = e.message;
    tb.replaceChildren();
    return;
  }
  $('#nodes-note').textContent = res.nodes.length + ' node(s); membership: ' + res.membership +
    '; lease ttl ' + res.lease_ttl_ms + ' ms (a node that stops shows missing within it)';
  tb.replaceChildren();
  for (const n of res.nodes) {
    const tr = document.createElement('tr');
    tr.dataset.node = n.node_id;
    tr.dataset.state = n.state;
    cell(tr, n.node_id + (n.self ? ' (this node)' : ''));
    cell(tr, n.state, n.state === 'ready' ? 'good' : n.state === 'degraded' ? 'warn' : 'bad');
    cell(tr, (n.reasons || []).join('; ') || '-');
    cell(tr, n.leases ? n.leases.count : '-', 'leases');
    const rooms = n.leases ? n.leases.rooms.join(', ') + (n.leases.truncated ? ' … (' + n.leases.count + ' in all)' : '') : '-';
    cell(tr, rooms || '(none)', 'rooms');
    cell(tr, n.version); cell(tr, n.admin_addr);
    cell(tr, n.seen_ms ? Math.max(0, Math.round((Date.now() - n.seen_ms) / 1000)) + ' s ago' : '-');
    tb.appendChild(tr);
  }
}

let updatedAt = 0;
function tick() {
  $('#updated').textContent = updatedAt ? 'updated ' + Math.round((Date.now() - updatedAt) / 1000) + ' s ago' : 'not loaded yet';
}

async function refresh() {
  try {
    await loadSummary();
    await loadRows(false);
    await loadAudit();
    await loadDlq();
    await loadMetrics();
    await loadNode();
    await loadNodes();
    updatedAt = Date.now();
    tick();
    say('loaded ' + new Date().toISOString());
  } catch (e) {
    say(e.message, true);
  }
}

// Auto-refresh: the live views every 5 s (the filtered rows stay as filtered).
async function poll() {
  if (!$('#auto-refresh').checked || !token && updatedAt === 0) return;
  try {
    await loadSummary();
    await loadDlq();
    await loadMetrics();
    await loadNode();
    await loadNodes();
    updatedAt = Date.now();
  } catch (e) {
    say(e.message, true);
  }
}
setInterval(tick, 1000);
setInterval(poll, 5000);

$('#token').value = token;
$('#token-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  token = $('#token').value.trim();
  sessionStorage.setItem('roomd_admin_token', token);
  refresh();
});
$('#filters').addEventListener('submit', (ev) => {
  ev.preventDefault();
  loadRows(false).then(() => say('filtered')).catch((e) => say(e.message, true));
});
$('#refresh').addEventListener('click', refresh);
$('#next-page').addEventListener('click', () => loadRows(true).catch((e) => say(e.message, true)));
$('#replay-btn').addEventListener('click', () => replayAsk().catch((e) => say(e.message, true)));
$('#confirm-go').addEventListener('click', () => replayGo().catch((e) => say(e.message, true)));
$('#confirm-cancel').addEventListener('click', () => $('#confirm').close());
refresh();
