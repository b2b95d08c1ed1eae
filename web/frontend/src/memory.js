// Memory-access profiles (csp-run --memory, docs/memory-profiles.md): the routines ranked by the
// growth of their cost, a routine's cost function (worst-case and mean cost per input size, on
// log-log axes, with the fitted model), and the all-window footprint and interleaving curves
// (0/5/50/95/100 % per window length). Points, fits and curves are csp-views' JSON (/api/cost,
// /api/growth, /api/footprint, /api/interleaving); this only places them.
import { scaleLog } from 'd3-scale';
import { el, svg, fmtValue, message } from './util.js';
import { api } from './api.js';

const W = 560;
const H = 300;
const PAD = { l: 64, r: 12, t: 12, b: 34 };
const CURVES = ['p0', 'p5', 'p50', 'p95', 'p100'];

// A log-log plot frame: axes with decade ticks, and the scales.
function logFrame(cls, xs, ys, xLabel, yLabel, attrs = {}) {
  const lo = (v) => Math.max(Math.min(...v), 1e-9);
  const x = scaleLog().domain([lo(xs), Math.max(...xs, lo(xs) * 2)]).range([PAD.l, W - PAD.r]).nice();
  const y = scaleLog().domain([lo(ys), Math.max(...ys, lo(ys) * 2)]).range([H - PAD.b, PAD.t]).nice();
  const plot = svg('svg', { width: W, height: H, class: cls, ...attrs });
  for (const t of y.ticks(4).filter((v) => Number.isInteger(Math.log10(v))))
    plot.append(svg('line', { x1: PAD.l, x2: W - PAD.r, y1: y(t), y2: y(t), class: 'grid' }),
      svg('text', { x: PAD.l - 4, y: y(t) + 4, 'text-anchor': 'end', class: 'axis', text: fmtValue(t) }));
  for (const t of x.ticks(4).filter((v) => Number.isInteger(Math.log10(v))))
    plot.append(svg('line', { x1: x(t), x2: x(t), y1: PAD.t, y2: H - PAD.b, class: 'grid' }),
      svg('text', { x: x(t), y: H - PAD.b + 14, 'text-anchor': 'middle', class: 'axis', text: fmtValue(t) }));
  plot.append(svg('text', { x: (PAD.l + W - PAD.r) / 2, y: H - 4, 'text-anchor': 'middle', class: 'axis-label', text: xLabel }),
    svg('text', { x: 12, y: (PAD.t + H - PAD.b) / 2, transform: `rotate(-90 12 ${(PAD.t + H - PAD.b) / 2})`, 'text-anchor': 'middle', class: 'axis-label', text: yLabel }));
  return { plot, x, y };
}

const polyline = (points, cls) => svg('path', { class: cls, d: points.map(([px, py], i) => `${i ? 'L' : 'M'}${px.toFixed(1)},${py.toFixed(1)}`).join('') });

// cost = a n^b log2(n)^c at n.
const model = (f, n) => f.a * n ** f.b * (f.c ? Math.log2(n) ** f.c : 1);
const better = (f) => (f.fit_nlogn && f.fit_power && f.fit_nlogn.r2 > f.fit_power.r2 ? f.fit_nlogn : f.fit_power);
const fitText = (fit) => (fit ? `cost = ${fmtValue(fit.a)} · n^${fit.b.toFixed(3)}${fit.c ? ' · log₂ n' : ''} (R² ${fit.r2.toFixed(4)})` : 'no fit (fewer than 3 sizes)');

export function costPlot(f) {
  const pts = f.points.filter((p) => p.size > 0 && p.worst_cost > 0);
  if (!pts.length) return message('No activation with a positive cost and input size.');
  const fit = better(f);
  const sizes = pts.map((p) => p.size);
  const costs = pts.flatMap((p) => [p.worst_cost, Math.max(p.mean_cost, 1e-9)]);
  const { plot, x, y } = logFrame('cost', sizes, costs, `input size (${f.size}, cells)`, `cost (${f.cost_unit})`,
    { 'data-routine': f.routine, 'data-metric': f.cost_metric, 'data-points': pts.length, 'data-exponent': fit ? fit.b : '' });
  if (fit) {
    const [n0, n1] = x.domain();
    const line = [];
    for (let i = 0; i <= 48; ++i) {
      const n = n0 * (n1 / n0) ** (i / 48);
      const c = model(fit, n);
      if (n >= 2 && c > 0 && c >= y.domain()[0] && c <= y.domain()[1]) line.push([x(n), y(c)]);
    }
    plot.append(polyline(line, 'fit'));
  }
  for (const p of pts) {
    const tip = `size ${p.size_low}${p.size_high !== p.size_low ? `–${p.size_high}` : ''}: ${p.calls} calls, worst ${fmtValue(p.worst_cost, f.cost_unit)}, mean ${fmtValue(p.mean_cost, f.cost_unit)}`;
    plot.append(svg('circle', { class: 'worst', cx: x(p.size), cy: y(p.worst_cost), r: 3.5, 'data-size': p.size, 'data-cost': p.worst_cost }, svg('title', { text: tip })),
      svg('rect', { class: 'mean', x: x(p.size) - 2.5, y: y(Math.max(p.mean_cost, 1e-9)) - 2.5, width: 5, height: 5, 'data-size': p.size, 'data-cost': p.mean_cost }, svg('title', { text: tip })));
  }
  return plot;
}

export function curvesPlot(c, interleaving) {
  const pts = c.points.filter((p) => p.length_low > 0);
  if (!pts.length) return message(interleaving ? 'No interleaving (the program ran one thread, or footprints were off).' : 'No footprint (measured with --no-footprint).');
  const lengths = pts.map((p) => (p.length_low + p.length_high) / 2);
  const values = pts.flatMap((p) => CURVES.map((k) => Math.max(p[k], 1)));
  const { plot, x, y } = logFrame(interleaving ? 'interleaving' : 'footprint', lengths, values, 'window length (accesses)',
    interleaving ? 'interleaving (accesses of the rarer thread)' : 'footprint (distinct blocks)', { 'data-points': pts.length });
  for (const k of CURVES) {
    const path = polyline(pts.map((p, i) => [x(lengths[i]), y(Math.max(p[k], 1))]), `curve ${k}`);
    path.setAttribute('data-curve', k);
    path.setAttribute('data-values', pts.map((p) => p[k]).join(','));
    plot.append(path);
  }
  return plot;
}

const legend = (items) => el('div.legend', {}, items.map(([cls, text]) => el('span', {}, el(`i.${cls}`), text)));

// The page of the Memory tab: controls, the growth ranking, the selected routine's cost function
// and the footprint and interleaving curves.
export class MemoryPage {
  constructor(host, db) {
    this.host = host;
    this.db = db;
    this.metric = 'instructions';
    this.size = 'trms';
    this.routine = null;
  }

  async load() {
    const select = (cls, options, value, set) => el(`select.${cls}`, { onchange: (e) => { set(e.target.value); this.load().catch((err) => this.fail(err)); } },
      options.map(([v, label]) => el('option', { value: v, selected: v === value }, label)));
    const controls = el('div.mem-controls', {}, 'cost ', select('cost-metric', [['instructions', 'instructions (exact)'], ['time', 'thread CPU time']], this.metric, (v) => { this.metric = v; }),
      ' input size ', select('size', [['trms', 'TRMS'], ['rms', 'RMS']], this.size, (v) => { this.size = v; }));
    this.rankingHost = el('div.mem-ranking');
    this.costHost = el('div.mem-cost');
    this.footprintHost = el('div.mem-footprint');
    this.host.replaceChildren(controls, this.rankingHost, this.costHost, this.footprintHost);
    const params = { db: this.db, size: this.size, cost_metric: this.metric };
    const [ranking] = await Promise.all([api('/api/growth', params), this.loadCurves()]);
    this.rankingHost.replaceChildren(this.rankingTable(ranking.answer));
    const first = ranking.answer.length ? ranking.answer[0].routine : null;
    if (!this.routine) this.routine = first;
    if (this.routine) await this.showRoutine(this.routine);
    else this.costHost.replaceChildren(message('No routine with enough input sizes for a cost function (csp-views --growth --min-sizes).'));
  }

  fail(e) { this.host.append(el('div.error', { text: e.message })); }

  rankingTable(rows) {
    const head = ['routine', 'growth exponent', 'model', 'R²', 'sizes', 'calls', 'induced input'];
    return el('div', {}, el('h4', { text: `Routines by growth of their cost (${this.metric})` }),
      el('table.small.growth', {}, el('thead', {}, el('tr', {}, head.map((h) => el('th', { text: h })))),
        el('tbody', {}, rows.map((r) => el('tr', { 'data-routine': r.routine, onclick: () => this.showRoutine(r.routine).catch((e) => this.fail(e)) },
          el('td', { text: r.routine }), el('td.num', { text: r.exponent.toFixed(3) }), el('td', { text: r.model }),
          el('td.num', { text: better(r).r2.toFixed(4) }), el('td.num', { text: r.fit_power ? String(r.fit_power.points) : '' }),
          el('td.num', { text: String(r.calls) }), el('td.num', { text: `${(100 * r.induced_share).toFixed(1)} %` }))))));
  }

  async showRoutine(routine) {
    this.routine = routine;
    for (const tr of this.rankingHost.querySelectorAll('tr[data-routine]')) tr.classList.toggle('selected', tr.dataset.routine === routine);
    const { answer: f } = await api('/api/cost', { db: this.db, routine, size: this.size, cost_metric: this.metric });
    this.costHost.replaceChildren(el('h4', { text: `Cost function of ${f.routine}` }),
      el('p.stats', {}, `${f.calls} calls in ${f.contexts} calling context${f.contexts > 1 ? 's' : ''} · power law: ${fitText(f.fit_power)} · n^b log n: ${fitText(f.fit_nlogn)}`),
      el('p.stats', { text: `input: TRMS ${f.trms} cells, RMS ${f.rms}; induced first reads ${f.induced_thread} from threads, ${f.induced_kernel} from the kernel (${(100 * f.induced_share).toFixed(1)} % of TRMS)` }),
      costPlot(f), legend([['worst', 'worst-case cost'], ['mem-mean', 'mean cost'], ['fit', 'fitted model (the better R²)']]));
  }

  async loadCurves() {
    const [fp, il] = await Promise.all([api('/api/footprint', { db: this.db }), api('/api/interleaving', { db: this.db })]);
    const parts = [el('h4', { text: `All-window footprint over ${fp.answer.threads} thread(s)` }), curvesPlot(fp.answer, false)];
    if (il.answer.points.length) parts.push(el('h4', { text: 'Interleaving of the main thread and the first thread it started' }), curvesPlot(il.answer, true));
    parts.push(legend(CURVES.map((k) => [`c-${k}`, `${k.slice(1)} %`])));
    this.footprintHost.replaceChildren(...parts);
  }
}
