// SPDX-License-Identifier: Apache-2.0
// gifts.js: the console's gift catalog view (docs/room.md, Gift catalog): the app's gifts
// with their price, rocket energy, enabled and version (GET /v1/gifts), a form to create or
// change one (POST /v1/gifts, conditional on the version shown: a concurrent change is
// refused 409 version_conflict and nothing is written) and enable/disable per row. Its own
// file, loaded after console.js; it reads the admin token console.js keeps in
// sessionStorage. Every value is written with textContent (never as HTML).
'use strict';

(() => {
  const q = (s) => document.querySelector(s);

  async function giftsApi(method, body) {
    const headers = { 'Content-Type': 'application/json' };
    const tok = sessionStorage.getItem('roomd_admin_token') || '';
    if (tok) headers.Authorization = 'Bearer ' + tok;
    const app = q('#g-app').value.trim();
    if (app) headers['X-App-Code'] = app;
    const r = await fetch('/v1/gifts', { method, headers, body: body ? JSON.stringify(body) : undefined });
    let j = null;
    try { j = await r.json(); } catch (e) { j = null; }
    if (!r.ok) throw new Error(j && j.error ? j.error.code + ': ' + j.error.message : 'HTTP ' + r.status);
    return j;
  }

  function note(text, isError) {
    const n = q('#g-note');
    n.textContent = text;
    n.className = isError ? 'error' : '';
  }

  function td(tr, text) {
    const c = document.createElement('td');
    c.textContent = text === null || text === undefined ? '-' : String(text);
    tr.appendChild(c);
    return c;
  }

  // Fills the form with gift g (the version it will be conditional on).
  function edit(g) {
    q('#g-id').value = g.gift_id;
    q('#g-price').value = g.unit_price;
    q('#g-energy').value = g.energy_per_unit;
    q('#g-enabled').checked = g.enabled;
    q('#g-version').value = g.version;
  }

  async function put(body) {
    const g = await giftsApi('POST', body);
    note(g.gift_id + ': version ' + g.version + ', unit_price ' + g.unit_price);
    await load();
  }

  async function load() {
    const j = await giftsApi('GET');
    q('#g-catalog').textContent = j.catalog;
    const tb = q('#gifts tbody');
    tb.replaceChildren();
    for (const g of j.gifts) {
      const tr = document.createElement('tr');
      tr.dataset.gift = g.gift_id;
      td(tr, g.gift_id); td(tr, g.unit_price); td(tr, g.energy_per_unit);
      td(tr, g.enabled ? 'yes' : 'no'); td(tr, g.version);
      td(tr, g.updated_at_ms > 0 ? new Date(g.updated_at_ms).toISOString() : '-');
      const b = document.createElement('button');
      b.type = 'button';
      b.textContent = g.enabled ? 'disable' : 'enable';
      b.addEventListener('click', (ev) => {
        ev.stopPropagation();
        put({ gift_id: g.gift_id, unit_price: g.unit_price, energy_per_unit: g.energy_per_unit,
              enabled: !g.enabled, version: g.version }).catch((e) => note(e.message, true));
      });
      td(tr, '').appendChild(b);
      tr.addEventListener('click', () => edit(g));
      tb.appendChild(tr);
    }
    if (q('#g-note').className === 'error') note(''); // loaded: an earlier failure is stale
  }

  q('#gift-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const body = { gift_id: q('#g-id').value.trim(), unit_price: Number(q('#g-price').value),
                   enabled: q('#g-enabled').checked };
    if (q('#g-energy').value !== '') body.energy_per_unit = Number(q('#g-energy').value);
    if (q('#g-version').value !== '') body.version = Number(q('#g-version').value);
    put(body).catch((e) => note(e.message, true));
  });
  q('#g-reload').addEventListener('click', () => load().catch((e) => note(e.message, true)));
  q('#token-form').addEventListener('submit', () => setTimeout(() => load().catch((e) => note(e.message, true)), 0));
  load().catch((e) => note(e.message, true));
})();
