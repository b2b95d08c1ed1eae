// node web_bench_browser.mjs URL: the web viewer's latency as a user sees it, in headless Debian
// chromium (tests/bench/web_bench.sh): navigation until the Calling Context view's first rows are
// shown, and a click on a node's toggle until its children are shown, five times each.
import { createRequire } from 'node:module';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const { chromium } = createRequire(join(process.env.CSP_WEB_NODE_MODULES, 'x.js'))('playwright-core');
const url = process.argv[2];
const profile = mkdtempSync(join(tmpdir(), 'csp-web-bench-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: '/usr/bin/chromium', headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const page = context.pages()[0] || (await context.newPage());
const first = [];
const expand = [];
for (let i = 0; i < 5; ++i) {
  const t0 = Date.now();
  await page.goto(url);
  await page.waitForSelector('table.tree tr.row');
  first.push((Date.now() - t0) / 1000);
  // Open the hottest path's nodes one by one: each click fetches that node's children.
  let row = page.locator('tr.row').nth(1);
  for (let level = 0; level < 3; ++level) {
    const id = await row.getAttribute('data-id');
    const before = await page.locator('tr.row').count();
    const t1 = Date.now();
    await row.locator('.toggle').click();
    await page.waitForFunction((n) => document.querySelectorAll('tr.row').length > n, before);
    expand.push((Date.now() - t1) / 1000);
    row = page.locator(`tr.row[data-id="${id}"] + tr.row`);
  }
}
const fmt = (xs) => `${xs.map((x) => x.toFixed(3)).join(' ')}  (s; best ${Math.min(...xs).toFixed(3)}, median ${[...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)].toFixed(3)})`;
console.log(`browser: page load to first rows           ${fmt(first)}`);
console.log(`browser: click to a node's children shown  ${fmt(expand)}`);
await context.close();
rmSync(profile, { recursive: true, force: true });
