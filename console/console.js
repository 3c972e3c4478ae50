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

async function show(eventId) {
  const r = await api('GET', '/admin/v1/outbox/' + encodeURIComponent(eventId));
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
}

async function loadDlq() {
  const tb = $('#dlq tbody');
  try {
    const res = await api('GET', '/admin/v1/dlq');
    $('#dlq-note').textContent = res.note || '';
    tb.replaceChildren();
    for (const m of res.messages) {
      const tr = document.createElement('tr');
      tr.dataset.seq = m.seq;
      cell(tr, m.seq); cell(tr, m.group); cell(tr, m.event_id); cell(tr, m.event_type);
      cell(tr, m.deliveries); cell(tr, m.reason);
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
      tb.appendChild(tr);
    }
  } catch (e) {
    $('#dlq-note').textContent = e.message;
  }
}

async function refresh() {
  try {
    await loadSummary();
    await loadRows(false);
    await loadAudit();
    await loadDlq();
    say('loaded ' + new Date().toISOString());
  } catch (e) {
    say(e.message, true);
  }
}

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
