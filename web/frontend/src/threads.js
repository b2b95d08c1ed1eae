// The per-thread plot of the selected node (csp-views --node): every thread's value as sorted
// bars (or a strip plot for many threads), with the mean, the quartiles, the sampling-error band
// and the thread classes; a click on a thread lists its own top contexts.
import { el, svg, fmtValue, classColour } from './util.js';
import { api } from './api.js';

const W = 440;
const H = 200;
const PAD = { l: 56, r: 8, t: 10, b: 22 };

export class ThreadPlot {
  constructor(host, { onContext }) {
    this.host = host;
    this.onContext = onContext || (() => {});
    this.mode = 'bars';
  }

  async show(params) {
    this.params = params;
    this.host.replaceChildren(el('div.loading', { text: 'loading per-thread values…' }));
    try {
      const { answer } = await api('/api/node', params);
      this.d = answer;
      this.render();
    } catch (e) {
      this.host.replaceChildren(el('div.note', { text: `per-thread values: ${e.message}` }));
    }
  }

  // The value of every thread, largest first; absent threads (value 0) last, without a profile.
  bars() {
    const d = this.d;
    const out = d.values.map((v) => ({ profile: v.profile, id: v.id, value: v.value, cls: v.class || '' }));
    for (let i = out.length; i < d.profiles; ++i) out.push({ profile: null, id: 'absent', value: 0, cls: '' });
    return out;
  }

  render() {
    const d = this.d;
    const all = d.all;
    const values = this.bars();
    const max = Math.max(all.max || 0, (all.mean || 0) + (d.sampling_error_per_thread || 0), 1e-300);
    const y = (v) => PAD.t + (H - PAD.t - PAD.b) * (1 - v / max);
    const plot = svg('svg', { width: W, height: H, class: 'threads', 'data-threads': d.profiles, 'data-mode': this.mode });
    const innerW = W - PAD.l - PAD.r;
    // Axis: 0, half, max.
    for (const v of [0, max / 2, max]) {
      plot.append(svg('line', { x1: PAD.l - 3, x2: W - PAD.r, y1: y(v), y2: y(v), class: 'grid' }));
      plot.append(svg('text', { x: PAD.l - 5, y: y(v) + 4, 'text-anchor': 'end', class: 'axis', text: fmtValue(v, d.unit) }));
    }
    const err = d.sampling_error_per_thread;
    if (err !== null && err > 0 && all.mean !== null)
      plot.append(svg('rect', { x: PAD.l, width: innerW, y: y(all.mean + err), height: Math.max(1, y(Math.max(0, all.mean - err)) - y(all.mean + err)), class: 'band' },
        svg('title', { text: `sampling error of one thread's value: ± ${fmtValue(err, d.unit)}` })));
    const mode = this.mode === 'strip' || values.length > 4096 ? 'strip' : 'bars';
    if (mode === 'bars') this.drawBars(plot, values, y, innerW);
    else this.drawStrip(plot, values, y, innerW);
    const line = (v, cls, label) => {
      if (v === null || v === undefined) return;
      plot.append(svg('line', { x1: PAD.l, x2: W - PAD.r, y1: y(v), y2: y(v), class: cls }, svg('title', { text: `${label}: ${fmtValue(v, d.unit)}` })));
    };
    line(all.p25, 'pct', 'p25');
    line(all.p50, 'pct median', 'median');
    line(all.p75, 'pct', 'p75');
    line(all.mean, 'mean', 'mean');
    plot.append(svg('text', { x: PAD.l, y: H - 6, class: 'axis', text: `${d.profiles} threads, sorted by value` }));

    const classes = [...new Set(values.map((v) => v.cls).filter((c) => c))];
    const legend = el('div.legend', {},
      classes.map((c) => el('span', {}, el('i', { style: `background:${classColour[c]}` }), c)),
      el('span', {}, el('i.mean'), 'mean'), el('span', {}, el('i.pct'), 'p25 / median / p75'),
      err > 0 ? el('span', {}, el('i.band'), 'sampling error') : null);
    const stats = el('div.stats', {},
      `${d.metric} ${d.scope} · N = ${d.profiles} (${d.threads}) · mean ${fmtValue(all.mean, d.unit)} · max ${fmtValue(all.max, d.unit)} · `,
      `imbalance ${all.imbalance === null ? '–' : all.imbalance.toFixed(3)}`,
      d.imbalance_within_sampling_error ? el('span.mark', { text: ' ~', title: 'the imbalance is within sampling error' }) : '',
      d.outliers.length ? ` · ${d.outliers.length} outlier${d.outliers.length > 1 ? 's' : ''}` : '');
    const modes = el('div.modes', {},
      ['bars', 'strip'].map((m) => el(`button${m === mode ? '.on' : ''}`, { text: m, onclick: () => { this.mode = m; this.render(); } })));
    this.contexts = el('div.thread-contexts');
    this.host.replaceChildren(el('div.plot-title', {}, el('b', { text: d.label }), ` — ${d.what}`), stats, modes, plot, legend, this.contexts);
  }

  drawBars(plot, values, y, innerW) {
    const d = this.d;
    const w = innerW / Math.max(values.length, 1);
    values.forEach((v, i) => {
      const top = y(Math.max(v.value, 0));
      const r = svg('rect', {
        x: PAD.l + i * w, y: top, width: Math.max(w - (w > 3 ? 1 : 0), 0.5), height: Math.max(y(0) - top, 0),
        fill: classColour[v.cls] || classColour[''], class: 'bar', 'data-profile': v.profile ?? '', 'data-value': v.value, 'data-class': v.cls,
        onclick: () => v.profile !== null && this.showThread(v),
      }, svg('title', { text: `${v.id}${v.cls ? ` (${v.cls})` : ''}: ${fmtValue(v.value, d.unit)}` }));
      plot.append(r);
    });
  }

  drawStrip(plot, values, y, innerW) {
    const d = this.d;
    let seed = 7;
    const rnd = () => ((seed = (seed * 16807) % 2147483647) / 2147483647);
    for (const v of values) {
      plot.append(svg('circle', {
        cx: PAD.l + 10 + rnd() * (innerW - 20), cy: y(Math.max(v.value, 0)), r: 2.5,
        fill: classColour[v.cls] || classColour[''], class: 'bar', 'data-profile': v.profile ?? '', 'data-value': v.value,
        onclick: () => v.profile !== null && this.showThread(v),
      }, svg('title', { text: `${v.id}: ${fmtValue(v.value, d.unit)}` })));
    }
  }

  // A thread's own top contexts (where its time went).
  async showThread(v) {
    this.contexts.replaceChildren(el('div.loading', { text: `top contexts of ${v.id}…` }));
    for (const r of this.host.querySelectorAll('.bar.picked')) r.classList.remove('picked');
    const picked = this.host.querySelector(`.bar[data-profile="${v.profile}"]`);
    if (picked) picked.classList.add('picked');
    try {
      const { answer } = await api('/api/thread', { db: this.params.db, profile: v.profile, metric: this.params.metric, threads: undefined, scope: 'exclusive', top: 12 });
      const rows = answer.contexts.map((c) => el('tr', { onclick: () => this.onContext(c.node), 'data-node': c.node },
        el('td', { text: c.label.replace(/\S*\/([^/\s]+:\d+)/g, '$1'), title: c.label }), el('td.num', { text: fmtValue(c.value, answer.unit) }),
        el('td.num', { text: answer.total ? `${((100 * c.value) / answer.total).toFixed(1)} %` : '' })));
      this.contexts.replaceChildren(
        el('div.plot-title', {}, el('b', { text: answer.id }), answer.class ? ` (${answer.class})` : '',
          ` — its top contexts by exclusive ${answer.metric} (total ${fmtValue(answer.total, answer.unit)})`),
        el('table.small', { 'data-profile': answer.profile }, el('tbody', {}, rows)));
    } catch (e) {
      this.contexts.replaceChildren(el('div.note', { text: e.message }));
    }
  }
}
