// End-to-end tests of the web viewer in a real browser: Debian's headless Chromium driven by
// playwright-core (never a browser download). A measured program's database (csp-run
// --region-log on tests/apps/regions.cpp, csp-prof-mpi) and a csp-diff database are served by
// csp-web; the tests click through the views as a user would and compare what the page shows
// with what csp-views prints. Screenshots are kept in CSP_WEB_ARTIFACTS.
//   CSP_BINARY_DIR, CSP_WEB_NODE_MODULES, CSP_WEB_ARTIFACTS: set by ctest (tests/web/CMakeLists.txt).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { spawn, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const BIN = process.env.CSP_BINARY_DIR;
const MODULES = process.env.CSP_WEB_NODE_MODULES;
const OUT = process.env.CSP_WEB_ARTIFACTS;
const tool = (name) => join(BIN, 'launcher', name);
const ENV = { ...process.env, OMPI_ALLOW_RUN_AS_ROOT: '1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: '1' };
const sh = (file, args, timeout = 120000) => execFileSync(file, args, { env: ENV, timeout, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });

let server;
let url;
let context;
let page;
let profile;
const pageErrors = [];
const work = join(OUT, 'work');
const db = join(work, 'run', 'db');
const diffDb = join(work, 'scaling-db');
const memDb = join(work, 'mem', 'db');
const haveValgrind = (() => {
  try {
    execFileSync('valgrind', ['--version'], { stdio: 'ignore', timeout: 20000 });
    return true;
  } catch {
    return false;
  }
})();

function requirePage() {
  const html = join(BIN, 'web', 'csp-web.html');
  const status = existsSync(join(BIN, 'web', 'assets-status.txt')) ? readFileSync(join(BIN, 'web', 'assets-status.txt'), 'utf8') : 'no status';
  if (!existsSync(html) || statSync(html).size === 0) throw new Error(`the web viewer's page was not built: ${status}`);
  if (!existsSync(join(MODULES, 'playwright-core'))) throw new Error(`playwright-core is not installed in ${MODULES} (web/frontend/build.sh)`);
}

function databases() {
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  sh(tool('csp-run'), ['--region-log', '--idleness', '-o', join(work, 'run', 'meas'), '--', join(BIN, 'tests', 'apps', 'csp-app-regions'), join(work, 'expected.txt'), '6']);
  sh(tool('csp-prof-mpi'), ['-q', join(work, 'run', 'meas'), '-o', db]);
  // A scaling study of a synthetic code at 2 and 4 ranks, and its loss.
  for (const ranks of [2, 4]) {
    const run = join(work, `p${ranks}`);
    sh(tool('csp-gen'), ['-q', '--ranks', String(ranks), '--nodes', '300', '--seed', '5', '--imbalance', '0.5', '-o', join(run, 'meas')]);
    sh(tool('csp-prof-mpi'), ['-q', join(run, 'meas'), '-o', join(run, 'db')]);
  }
  sh(tool('csp-diff'), ['--quiet', join(work, 'p2', 'db'), join(work, 'p4', 'db'), '-o', diffDb]);
  // Memory-access profiles of routines of known cost (csp-run --memory; footprints at c = 50 %).
  if (!haveValgrind) return;
  sh(tool('csp-run'), ['--memory', '--footprint-precision', '50', '-o', join(work, 'mem', 'meas'), '--', join(BIN, 'tests', 'apps', 'csp-app-memory'), 'costs'], 240000);
  sh(tool('csp-prof-mpi'), ['-q', join(work, 'mem', 'meas'), '-o', memDb]);
}

async function startServer() {
  server = spawn(tool('csp-web'), ['-q', db, diffDb, ...(haveValgrind ? [memDb] : [])], { env: ENV, stdio: ['ignore', 'pipe', 'inherit'] });
  url = await new Promise((resolve, reject) => {
    let text = '';
    const timer = setTimeout(() => reject(new Error(`csp-web printed no URL: ${text}`)), 20000);
    server.stdout.on('data', (d) => {
      text += d;
      const m = text.match(/http:\/\/127\.0\.0\.1:\d+\/\?token=[0-9a-f]+/);
      if (m) { clearTimeout(timer); resolve(m[0]); }
    });
    server.on('exit', (code) => reject(new Error(`csp-web exited (${code}): ${text}`)));
  });
}

async function startBrowser() {
  const { chromium } = createRequire(join(MODULES, 'x.js'))('playwright-core');
  profile = mkdtempSync(join(tmpdir(), 'csp-web-chromium-'));
  context = await chromium.launchPersistentContext(profile, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
    viewport: { width: 1280, height: 760 },
  });
  page = context.pages()[0] || (await context.newPage());
  page.setDefaultTimeout(20000);
  page.on('pageerror', (e) => pageErrors.push(e.message));
}

const shot = (name) => page.screenshot({ path: join(OUT, `${name}.png`) });
const cli = (args) => JSON.parse(sh(tool('csp-views'), args));

before(async () => {
  requirePage();
  mkdirSync(OUT, { recursive: true });
  databases();
  await startServer();
  await startBrowser();
});

after(async () => {
  if (context) await context.close();
  if (server) server.kill('SIGTERM');
  if (profile) rmSync(profile, { recursive: true, force: true });
});

test('opens the measured database and expands the hottest path', async () => {
  // The first view asks for one level of the tree (lazy: a CCT of a million nodes is not sent).
  const views = [];
  const seen = (r) => { if (r.url().includes('/api/view')) views.push(new URL(r.url()).searchParams); };
  page.on('request', seen);
  await page.goto(url);
  await page.waitForSelector('.tree-host[data-state=ready] table.tree tr.row');
  page.off('request', seen);
  assert.ok(views.length > 0);
  for (const v of views) assert.equal(v.get('depth'), '1', String(v));
  await page.click('button.hot');
  // The hottest path of the program ends in the spin loop's statements (kernel.hpp).
  await page.waitForFunction(() => {
    const tr = document.querySelector('tr.row.selected');
    return tr && tr.dataset.kind === 'statement';
  });
  const selected = await page.textContent('tr.row.selected .label');
  assert.match(selected, /kernel\.hpp:\d+/);
  const rows = await page.$$eval('tr.row', (trs) => trs.length);
  assert.ok(rows > 10, `${rows} rows`);
  await page.waitForSelector('svg.threads');
  await shot('calling-context');
});

test('the per-thread plot of a node shows every thread with its value', async () => {
  const row = page.locator('tr.row', { has: page.locator('.label', { hasText: /^region_work$/ }) }).first();
  const id = await row.getAttribute('data-id');
  await row.click();
  await page.waitForFunction((spec) => document.querySelector('.plot-title') && document.querySelector('.plot-title').textContent.includes(`CCT node ${spec}`), id);
  const expected = cli(['--node', id, '--format', 'json', db]);
  const n = Number(await page.getAttribute('svg.threads', 'data-threads'));
  assert.equal(n, expected.profiles);
  assert.equal(n, 9, 'the main thread and 8 workers');
  const values = await page.$$eval('svg.threads rect.bar', (rs) => rs.map((r) => Number(r.dataset.value)));
  assert.equal(values.length, n);
  const want = expected.values.map((v) => v.value);
  while (want.length < n) want.push(0);
  assert.deepEqual(values, want);
  // Thread classes as csp-views names them, the band of one thread's sampling error.
  const classes = await page.$$eval('svg.threads rect.bar', (rs) => rs.map((r) => r.dataset.class));
  assert.deepEqual(classes.slice(0, expected.values.length), expected.values.map((v) => v.class || ''));
  const named = [...new Set(expected.values.map((v) => v.class).filter(Boolean))];
  assert.ok(named.length > 0, 'csp-views names the threads\' classes');
  const legend = await page.textContent('.plot .legend');
  for (const c of named) assert.ok(legend.includes(c), `${c} in the legend: ${legend}`);
  if (expected.sampling_error_per_thread > 0) assert.equal((await page.$$('svg.threads rect.band')).length, 1);
  // The straggler (double work) is the tallest bar; its own top contexts are listed on a click.
  assert.ok(values[0] > 1.5 * values[1], `straggler ${values[0]} vs ${values[1]}`);
  await page.click('svg.threads rect.bar >> nth=0');
  await page.waitForSelector('.thread-contexts table tr');
  const profileShown = Number(await page.getAttribute('.thread-contexts table', 'data-profile'));
  assert.equal(profileShown, expected.values[0].profile);
  await shot('per-thread');
});

test('search finds a procedure and the source pane shows its lines', async () => {
  await page.fill('input.search', 'region_work');
  await page.press('input.search', 'Enter');
  await page.waitForSelector('.tree-host[data-state=ready][data-keep=region_work] table.tree');
  const labels = await page.$$eval('tr.row .label', (ls) => ls.map((l) => l.textContent));
  assert.ok(labels.includes('region_work'), labels.join(', '));
  const row = page.locator('tr.row', { has: page.locator('.label', { hasText: /^region_work$/ }) }).first();
  await row.click();
  await page.click('button.source-btn');
  await page.waitForSelector('table.src');
  assert.equal(await page.getAttribute('table.src', 'data-readable'), '1');
  const focus = Number(await page.getAttribute('tr.src-line.focus', 'data-line'));
  const text = await page.textContent('tr.src-line.focus .src-text');
  assert.ok(text.includes('region_work'), `line ${focus}: ${text}`);
  assert.ok((await page.$$('tr.src-line.costly')).length > 0, 'lines with costs');
  assert.ok((await page.$$('table.src .loop')).length > 0, 'a loop header marked');
  await shot('source');
  await page.fill('input.search', '');
  await page.press('input.search', 'Enter');
});

test('focus re-roots the tree at a node, hide leaves a procedure out', async () => {
  await page.waitForSelector('.tree-host[data-state=ready][data-keep=""] table.tree tr.row');
  await page.click('button.hot');
  await page.waitForSelector('.tree-host[data-hot-path=open]');
  const row = page.locator('tr.row', { has: page.locator('.label', { hasText: /^region_work$/ }) }).first();
  const id = await row.getAttribute('data-id');
  await row.click();
  await page.click('.actions button:has-text("focus here")');
  await page.waitForSelector(`span.focus:has-text("focus #${id}")`);
  await page.waitForSelector('.tree-host[data-state=ready] table.tree tr.row');
  // The same nodes as csp-views --focus at the page's depth.
  const focused = cli(['--focus', id, '--depth', '1', '--format', 'json', db]);
  const shown = await page.$$eval('tr.row', (trs) => trs.map((t) => Number(t.dataset.id)));
  assert.deepEqual(shown, focused.nodes.map((n) => n.id));
  assert.equal(focused.nodes[0].name, 'region_work');
  await page.click('span.focus button');
  await page.waitForFunction(() => !document.querySelector('span.focus button'));
  // Hidden with its subtree: the hottest path no longer passes through it.
  await page.fill('input.hide', 'region_work');
  await page.press('input.hide', 'Enter');
  await page.waitForSelector('.tree-host[data-state=ready] table.tree tr.row');
  await page.click('button.hot');
  await page.waitForSelector('.tree-host[data-hot-path=open]');
  const labels = await page.$$eval('tr.row .label', (ls) => ls.map((l) => l.textContent));
  assert.ok(labels.length > 3 && !labels.includes('region_work'), labels.join(', '));
  await page.fill('input.hide', '');
  await page.press('input.hide', 'Enter');
  await page.waitForSelector('.tree-host[data-state=ready] table.tree tr.row');
});

test('the flame graph zooms into a frame', async () => {
  await page.click('button.tab[data-tab=flame]');
  await page.waitForSelector('svg.flame');
  const frames = Number(await page.getAttribute('svg.flame', 'data-frames'));
  assert.ok(frames > 5, `${frames} frames`);
  // The text view's pruning: the frames are the nodes csp-views shows (call sites folded).
  const text = cli(['-s', 'sum,imbalance', '--scope', 'inclusive', '--depth', '32', '--format', 'json', db]);
  assert.equal(frames, text.nodes.filter((n) => n.kind !== 'callsite').length);
  await shot('flame');
  const target = page.locator('svg.flame g.frame', { has: page.locator('text', { hasText: 'region_work' }) }).first();
  await target.click();
  await page.waitForFunction((before) => {
    const s = document.querySelector('svg.flame');
    return s && Number(s.dataset.frames) < before;
  }, frames);
  // Bottom-up: the procedures' own cost split by caller chains; region_work's inlined kernel
  // holds it all.
  await page.selectOption('select.flame-kind', 'callers');
  await page.waitForFunction(() => document.querySelector('select.flame-kind') && document.querySelector('select.flame-kind').value === 'callers' && document.querySelector('svg.flame'));
  await page.waitForSelector('svg.flame g.frame');
});

test('the timeline shows a lane per thread and zooms without reading the whole log', async () => {
  await page.click('button.tab[data-tab=timeline]');
  await page.waitForSelector('.timeline-host[data-state=ready]');
  const c = await page.$eval('canvas.timeline', (e) => ({ ...e.dataset }));
  assert.equal(Number(c.lanes), 9);
  assert.ok(Number(c.intervals) > 9);
  await page.fill('input.tl-query', 'exists1 t: (t, compute)');
  await page.click('.tl-controls button:has-text("highlight")');
  await page.waitForFunction(() => Number(document.querySelector('canvas.timeline').dataset.frames) > 0);
  await shot('timeline');
  for (let i = 0; i < 3; ++i) {
    const before = await page.$eval('canvas.timeline', (e) => e.dataset.to - e.dataset.from);
    await page.click('.tl-controls button:has-text("zoom in")');
    await page.waitForFunction((b) => {
      const e = document.querySelector('canvas.timeline');
      return e.dataset.to - e.dataset.from < b && document.querySelector('.timeline-host').dataset.state === 'ready';
    }, before);
  }
  const z = await page.$eval('canvas.timeline', (e) => ({ ...e.dataset }));
  assert.ok(Number(z.to) - Number(z.from) < (Number(c.to) - Number(c.from)) / 4);
  await shot('timeline-zoomed');
});

test('a csp-diff database shows the scaling loss, its hot path and marks', async () => {
  await page.selectOption('select.db', '1');
  await page.waitForSelector('table.losses tbody tr');
  const report = cli(['--info', '--format', 'json', diffDb]);
  assert.ok(report.cct_nodes > 1);
  const rows = await page.$$eval('table.losses tbody tr', (trs) => trs.length);
  assert.ok(rows > 0);
  await page.waitForSelector('.loss-tree table.tree tr.row');
  await page.click('.loss-tree button.hot');
  await page.waitForSelector('.loss-tree tr.hot-path');
  // Coloured by loss: red where the run at q lost, blue where it gained.
  const colours = await page.$$eval('.loss-tree tr.row[data-loss]', (trs) => trs.map((t) => {
    const colour = t.style.backgroundColor;
    const [r, , b] = (colour.match(/\d+/g) || []).map(Number);
    return { loss: Number(t.dataset.loss), colour, r, b };
  }));
  assert.ok(colours.some((c) => c.loss > 1), JSON.stringify(colours));
  for (const c of colours) {
    assert.ok(c.colour.startsWith('rgb'), JSON.stringify(c));
    if (c.loss > 1) assert.ok(c.r > c.b, JSON.stringify(c));
    if (c.loss < -1) assert.ok(c.b > c.r, JSON.stringify(c));
  }
  await shot('scaling-loss');
  // csp-gen's source files are not on this machine: the source pane says so, with the lines' costs.
  await page.locator('.loss-tree tr.row[data-kind=procedure]').first().click();
  await page.click('button.source-btn');
  await page.waitForSelector('table.src[data-readable="0"]');
  assert.match(await page.textContent('.note.unreadable'), /not readable on the machine serving this page/);
  assert.ok((await page.$$('tr.src-line.costly')).length > 0);
});

test('effort, regions and a second panel side by side', async () => {
  await page.selectOption('select.db', '0');
  await page.click('button.tab[data-tab=effort]');
  await page.waitForSelector('td.effort .stack');
  await page.click('button.hot');
  await page.waitForFunction(() => document.querySelectorAll('td.effort .stack').length > 5);
  assert.ok((await page.$$('td.effort .note')).length > 0, 'a Fig. 5.1 reading');
  await shot('effort');
  await page.click('button.tab[data-tab=regions]');
  await page.waitForSelector('table.tree tr.row');
  await page.click('button.hot');
  await page.waitForFunction(() => [...document.querySelectorAll('tr.row .label')].some((l) => l.textContent === 'compute'));
  await page.click('button.add');
  assert.equal(await page.$$eval('section.panel', (p) => p.length), 2);
  await page.waitForSelector('section.panel:nth-child(2) table.tree tr.row');
  await shot('side-by-side');
  await page.click('button.remove');
  assert.equal(await page.$$eval('section.panel', (p) => p.length), 1);
});

test('imbalance causes and the info page', async () => {
  await page.selectOption('select.db', '0');
  await page.click('button.tab[data-tab=imbalance]');
  await page.waitForSelector('.page h3');
  assert.match(await page.textContent('.page h3'), /Load imbalance/);
  await shot('imbalance');
  await page.click('button.tab[data-tab=info]');
  await page.waitForSelector('table.info');
});

test('a memory-access profile plots cost functions with their fits and the footprint curves', { skip: haveValgrind ? false : 'valgrind is not installed' }, async () => {
  await page.selectOption('select.db', '2');
  await page.click('button.tab[data-tab=memory]');
  await page.waitForSelector('svg.cost[data-routine]');
  const growth = cli(['--growth', '--format', 'json', memDb]);
  assert.deepEqual(await page.$$eval('table.growth tr[data-routine]', (r) => r.map((x) => x.dataset.routine)), growth.map((g) => g.routine));
  assert.equal(growth[0].routine, 'quadratic_pairs');
  const plotted = async (metric) => {
    await page.click('table.growth tr[data-routine="quadratic_pairs"]');
    const svgSel = `svg.cost[data-routine="quadratic_pairs"][data-metric="${metric}"]`;
    await page.waitForSelector(svgSel);
    const expected = cli(['--cost', 'quadratic_pairs', '--cost-metric', metric, '--format', 'json', memDb]);
    const worst = await page.$$eval(`${svgSel} circle.worst`, (c) => c.map((x) => [Number(x.dataset.size), Number(x.dataset.cost)]));
    const mean = await page.$$eval(`${svgSel} rect.mean`, (c) => c.map((x) => [Number(x.dataset.size), Number(x.dataset.cost)]));
    assert.deepEqual(worst, expected.points.map((p) => [p.size, p.worst_cost]));
    assert.deepEqual(mean, expected.points.map((p) => [p.size, p.mean_cost]));
    // The fitted model is drawn across the points, with the exponent of the better fit.
    const fit = expected.fit_nlogn.r2 > expected.fit_power.r2 ? expected.fit_nlogn : expected.fit_power;
    assert.equal(Number(await page.getAttribute(svgSel, 'data-exponent')), fit.b);
    assert.ok((await page.getAttribute(`${svgSel} path.fit`, 'd')).split('L').length > 20, 'a fitted curve');
    return fit;
  };
  assert.ok(Math.abs((await plotted('instructions')).b - 2) < 0.1);
  await shot('memory-cost');
  await page.selectOption('select.cost-metric', 'time');
  await plotted('time');
  // The footprint curves are csp-views --footprint's percentiles, one path each.
  const fp = cli(['--footprint', '--format', 'json', memDb]).points.filter((p) => p.length_low > 0);
  for (const k of ['p0', 'p5', 'p50', 'p95', 'p100'])
    assert.equal(await page.getAttribute(`svg.footprint path[data-curve=${k}]`, 'data-values'), fp.map((p) => p[k]).join(','));
  await page.locator('svg.footprint').scrollIntoViewIfNeeded();
  await shot('memory-footprint');
});

test('csp-web --html writes one page that opens without a server', async () => {
  const report = join(OUT, 'report.html');
  sh(tool('csp-web'), ['--html', report, db, diffDb]);
  const r = await context.newPage();
  await r.goto(`file://${report}`);
  await r.waitForSelector('table.tree tr.row');
  await r.click('button.hot');
  await r.waitForSelector('svg.threads');
  await r.screenshot({ path: join(OUT, 'report.png') });
  await r.close();
});

test('the page raised no error', () => {
  assert.deepEqual(pageErrors, []);
});
