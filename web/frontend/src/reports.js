// The answers shown as pages rather than trees: load-imbalance causes, the scaling-loss report of
// a csp-diff database, the experiment's description; and the readings that decorate a tree's
// rows (effort bars, scaling loss colours and marks).
import { el, fmtValue, fmtPercent, lossColour } from './util.js';

export function imbalancePage(r, onContext) {
  const threads = (list) => list.map((t) => `${t.id} (${fmtValue(t.value, r.unit)})`).join(', ');
  const causes = r.causes.map((c, i) => el('tr', { onclick: () => onContext(c.context), 'data-node': c.context },
    el('td', { text: String(i + 1) }), el('td', {}, el('b', { text: c.label }), el('div.path', { text: c.path })),
    el('td.num', { text: fmtPercent(100 * c.share) }), el('td.num', { text: c.correlation.toFixed(2) }),
    el('td.num', { text: c.p_value.toExponential(1) }), el('td', { text: threads(c.threads) }),
    el('td', { text: c.sites.map((s) => s.label).join(', ') })));
  return el('div.page', {},
    el('h3', { text: `Load imbalance of ${r.section}` }),
    el('p', {}, `${r.metric}: ${r.samples} threads (${r.threads}) · mean ${fmtValue(r.mean, r.unit)} · max ${fmtValue(r.max, r.unit)} · imbalance ${r.imbalance === null ? '–' : r.imbalance.toFixed(3)} · verdict: `, el('b', { text: r.verdict_text })),
    r.notes.length ? el('ul', {}, r.notes.map((n) => el('li', { text: n }))) : null,
    el('p', { text: `Slowest threads: ${threads(r.slowest)}` }),
    r.causes.length
      ? el('table.small.causes', {}, el('thead', {}, el('tr', {}, ['#', 'cause (context)', 'share of variance', 'correlation', 'p', 'threads', 'further sites'].map((h) => el('th', { text: h })))), el('tbody', {}, causes))
      : el('p.note', { text: 'No cause explains the imbalance by the report\'s thresholds.' }),
    el('p.note', { text: `${r.contexts_analysed} of ${r.contexts_in_section} contexts analysed, ${r.scopes_tested} scopes tested; model p = ${r.model_p_value === null ? '–' : Number(r.model_p_value).toExponential(1)}, R² = ${r.r2 === null ? '–' : Number(r.r2).toFixed(2)}. Click a cause to see it in the calling context.` }));
}

export function diffPage(r, onContext) {
  const unit = r.study.unit;
  const row = (c) => el('tr', { onclick: () => onContext(c.node), 'data-node': c.node, style: `background:${lossColour((c.inclusive.share || 0) / 100)}` },
    el('td', { text: c.mark.trim(), title: c.mark === '~' ? 'within sampling error: may be noise' : c.mark === '+' ? 'only in run Q' : c.mark === '-' ? 'only in run P' : '' }),
    el('td', { text: c.label }), el('td.num', { text: fmtPercent(c.inclusive.loss) }), el('td.num', { text: fmtPercent(c.exclusive.loss) }),
    el('td.num', { text: fmtPercent(c.inclusive.share) }), el('td.num', { text: fmtValue(c.inclusive.excess, unit) }));
  const table = (rows) => el('table.small.losses', {}, el('thead', {}, el('tr', {}, ['', 'context', 'loss I', 'loss E', 'share', 'excess'].map((h) => el('th', { text: h })))), el('tbody', {}, rows.map(row)));
  return el('div.page', {},
    el('h3', { text: `Scaling loss (${r.study.mode}) of ${r.study.metric}: p = ${r.study.p} → q = ${r.study.q}` }),
    el('p', {}, `total loss ${fmtPercent(r.total.loss)} (excess ${fmtValue(r.total.excess, unit)}) · runs: ${r.runs.p.title || r.runs.p.database} → ${r.runs.q.title || r.runs.q.database}`),
    r.hot_path.nodes.length ? el('p.hot', {}, 'loss hot path: ', el('b', { text: r.hot_path.label }), ` (loss ${fmtPercent(r.hot_path.end.loss)})`) : null,
    el('h4', { text: 'Top contexts by inclusive loss' }), table(r.contexts.losses),
    r.contexts.gains.length ? [el('h4', { text: 'Largest gains' }), table(r.contexts.gains)] : null,
    r.contexts.one_run_only.rows.length ? [el('h4', { text: `Contexts in one run only (${r.contexts.only_q} only in q, ${r.contexts.only_p} only in p)` }), table(r.contexts.one_run_only.rows)] : null,
    el('p.note', { text: '~ within sampling error (may be noise) · + only in run Q · − only in run P · red: loss, blue: gain. The tree below is the union CCT coloured by inclusive loss.' }));
}

// Tree decoration of a diff database's Calling Context view: loss colour, hot path, noise.
export function diffDecorator(report) {
  const hot = new Set(report ? report.hot_path.nodes : []);
  return (tr, n, tree) => {
    const loss = tree.columns.find((c) => c.metric === 'loss');
    const excess = tree.columns.find((c) => c.metric === 'excess');
    const noise = tree.columns.find((c) => c.metric === 'noise');
    if (loss) {
      tr.style.background = lossColour((n.values[loss.title] || 0) / 100);
      tr.dataset.loss = n.values[loss.title] ?? '';
    }
    if (hot.has(n.id)) {
      tr.classList.add('hot-path');
      tr.querySelector('td.name').append(el('span.mark.hot', { text: '▶', title: 'on the loss hot path' }));
    }
    if (excess && noise && n.values[excess.title] !== null && Math.abs(n.values[excess.title]) <= (n.values[noise.title] || 0))
      tr.querySelector('td.name').append(el('span.mark', { text: '~', title: 'within sampling error: may be noise' }));
  };
}

// Effort bars (thesis Fig. 5.1): work, idleness and overhead stacked, widths by the root's effort.
export function effortDecorator(tr, n, tree) {
  const col = (m) => tree.columns.find((c) => c.metric === m && c.scope === 'inclusive');
  const work = col('work');
  const idle = col('idleness');
  const over = col('overhead');
  if (!work || !idle) return;
  const total = (work.root_sum || 0) + (idle.root_sum || 0) || 1;
  const w = n.values[work.title] || 0;
  const i = n.values[idle.title] || 0;
  const o = over ? n.values[over.title] || 0 : 0;
  const pct = (v) => `${Math.max(0, (100 * v) / total)}%`;
  tr.append(el('td.effort', {},
    el('div.stack', { title: `work ${fmtValue(w, work.unit)} (of which overhead ${fmtValue(o, work.unit)}), idleness ${fmtValue(i, idle.unit)}` },
      el('span.work', { style: `width:${pct(w - o)}` }), el('span.overhead', { style: `width:${pct(o)}` }), el('span.idle', { style: `width:${pct(i)}` })),
    n.note ? el('span.note', { text: n.note }) : null));
}

export function infoPage(info) {
  const kv = (k, v) => (v === undefined || v === null || v === '' ? null : el('tr', {}, el('th', { text: k }), el('td', { text: String(v) })));
  return el('div.page', {},
    el('table.small.info', {}, el('tbody', {},
      kv('database', info.database), kv('format', info.format), kv('title', info.title), kv('executable', info.executable),
      kv('command', (info.command || []).join(' ')), kv('processes', info.measured_processes), kv('threads', info.threads),
      kv('hosts', (info.hosts || []).join(', ')), kv('CCT nodes', info.cct_nodes), kv('bytes', info.bytes))),
    el('h4', { text: 'Metrics' }),
    el('table.small', {}, el('tbody', {}, (info.metrics || []).map((m) => el('tr', {}, el('td', { text: m.name }), el('td', { text: m.unit }), el('td', { text: m.kind }), el('td', { text: m.description }))))));
}
