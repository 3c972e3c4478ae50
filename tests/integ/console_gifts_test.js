// SPDX-License-Identifier: Apache-2.0
// console_gifts_test.js: drives the console's gift catalog view (console/gifts.js) in headless
// Chromium, as tests/integ/test_console_gifts.py asks: log in with the admin token, see the
// seeded gift, change its price through the form, disable it with its row's button, then try a
// save based on a stale version (refused: the page shows version_conflict). Prints one JSON
// line with what it saw; exits 1 on any failure.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { chromium } = require(path.join(__dirname, '..', 'standins', 'node_modules', 'playwright-core'));

const URL = process.env.CONSOLE_URL;
const TOKEN = process.env.CONSOLE_TOKEN;

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
    await page.fill('#token', TOKEN);
    await page.click('#save-token');
    const row = '#gifts tbody tr[data-gift="ring"]';
    await page.waitForSelector(row);
    out.seeded_price = Number(await page.textContent(row + ' td:nth-child(2)'));
    out.catalog = await page.textContent('#g-catalog');
    // edit: a click fills the form with the row (its version), then a new price
    await page.click(row + ' td:nth-child(1)');
    await page.fill('#g-price', '1500');
    await page.click('#g-save');
    await page.waitForFunction((r) => document.querySelector(r + ' td:nth-child(2)').textContent === '1500', row);
    out.version_after_edit = Number(await page.textContent(row + ' td:nth-child(5)'));
    // the row's button disables it
    await page.click(row + ' button');
    await page.waitForFunction((r) => document.querySelector(r + ' td:nth-child(4)').textContent === 'no', row);
    out.enabled_after_toggle = await page.textContent(row + ' td:nth-child(4)');
    // a save based on a version no longer current: refused, the page says so
    await page.fill('#g-id', 'ring');
    await page.fill('#g-price', '1');
    await page.fill('#g-version', '1');
    await page.click('#g-save');
    await page.waitForFunction(() => document.querySelector('#g-note').textContent.includes('version_conflict'));
    out.conflict_note = await page.textContent('#g-note');
    out.errors = errors;
  } finally {
    await ctx.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
  console.log(JSON.stringify(out));
})().catch((e) => { console.error(String(e && e.stack || e)); process.exit(1); });
