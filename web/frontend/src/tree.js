// An expandable table of a view (Calling Context, Callers, Flat, Regions; the diff and effort
// readings decorate it). Lazy: the top comes first, a node's children when it is opened, so a
// CCT of a million nodes is never sent whole. Columns, values, percentages, ids and order are the
// presentation layer's (csp-views').
import { el, fmtValue, fmtPercent, nodeLabel, place } from './util.js';

export class TreeTable {
  // fetchTop() -> ViewTree answer; fetchChildren(id) -> ViewTree answer of the node and its children.
  constructor(host, { fetchTop, fetchChildren, onSelect, decorate, extraHeader }) {
    this.host = host;
    this.fetchTop = fetchTop;
    this.fetchChildren = fetchChildren;
    this.onSelect = onSelect || (() => {});
    this.decorate = decorate || (() => {});
    this.extraHeader = extraHeader;
    this.nodes = new Map(); // id -> {n, children: [ids] | null, open}
    this.roots = [];
    this.selected = null;
  }

  // host's data-state: loading, then ready (what tests and scripts wait for).
  async load() {
    this.host.dataset.state = 'loading';
    this.host.replaceChildren(el('div.loading', { text: 'loading…' }));
    const { answer, warnings } = await this.fetchTop();
    this.tree = answer;
    this.nodes.clear();
    this.roots = [];
    this.absorb(answer, null);
    for (const id of this.roots) {
      const e = this.nodes.get(id);
      if (e.n.kind === 'root' && e.children) e.open = true;
    }
    this.warnings = warnings;
    this.render();
    this.host.dataset.state = 'ready';
    return answer;
  }

  // Adds an answer's nodes; nodes whose children it holds are open.
  absorb(answer, under) {
    const seen = new Set();
    for (const n of answer.nodes) {
      let e = this.nodes.get(n.id);
      if (!e) {
        e = { n, children: null, open: false };
        this.nodes.set(n.id, e);
      }
      seen.add(n.id);
      const parent = n.parent >= 0 && seen.has(n.parent) ? this.nodes.get(n.parent) : null;
      if (parent) {
        if (!parent.children || !parent._filled) {
          parent.children = [];
          parent._filled = true;
          parent.open = true;
        }
        if (!parent.children.includes(n.id)) parent.children.push(n.id);
      } else if (under === null) {
        this.roots.push(n.id);
      }
    }
    for (const id of seen) {
      const e = this.nodes.get(id);
      delete e._filled;
      if (!e.children && !e.n.truncated) e.children = [];
    }
  }

  hasChildren(e) {
    return e.n.truncated || (e.children && e.children.length > 0);
  }

  // An answer that did not come (a refused request, a lost server): said above the table.
  fail(e) {
    this.host.prepend(el('div.error', { text: e.message }));
  }

  async toggle(id) {
    const e = this.nodes.get(id);
    if (!e) return;
    if (e.open) {
      e.open = false;
      this.render();
      return;
    }
    await this.expand(id);
  }

  async expand(id) {
    const e = this.nodes.get(id);
    if (!e) return;
    if (!e.children || (e.n.truncated && e.children.length === 0)) {
      const { answer } = await this.fetchChildren(id);
      e.children = null;
      this.absorb(answer, id);
      e.n.truncated = false;
      if (!e.children) e.children = [];
    }
    e.open = true;
    this.render();
  }

  // Opens the hottest child (the first in the view's order) from the top, level after level.
  async expandHotPath(maxDepth = 40) {
    let id = this.roots[0];
    for (let depth = 0; id !== undefined && depth < maxDepth; ++depth) {
      await this.expand(id);
      const e = this.nodes.get(id);
      this.select(id);
      if (!e.children || e.children.length === 0) break;
      id = e.children[0];
    }
    if (id !== undefined) this.select(id);
    this.scrollToSelected();
    return id;
  }

  select(id) {
    this.selected = id;
    for (const tr of this.host.querySelectorAll('tr.selected')) tr.classList.remove('selected');
    const tr = this.host.querySelector(`tr[data-id="${id}"]`);
    if (tr) tr.classList.add('selected');
    const e = this.nodes.get(id);
    if (e) this.onSelect(e.n, this.tree);
  }

  scrollToSelected() {
    const tr = this.host.querySelector('tr.selected');
    if (tr) tr.scrollIntoView({ block: 'nearest' });
  }

  render() {
    const t = this.tree;
    const head = el('tr', {}, el('th.name', { text: 'Scope' }),
      t.columns.map((c) => el('th.num', { title: `${c.metric} ${c.statistic} ${c.scope}${c.unit ? ` (${c.unit})` : ''}` }, c.title)),
      this.extraHeader ? el('th', { text: this.extraHeader }) : null);
    const body = el('tbody');
    const walk = (id, depth) => {
      const e = this.nodes.get(id);
      if (!e) return;
      body.append(this.row(e, depth));
      if (e.open && e.children) for (const c of e.children) walk(c, depth + 1);
    };
    for (const r of this.roots) walk(r, 0);
    const p = t.pruned || {};
    const summary = el('div.summary', {},
      `${t.view} view · ${t.profiles} profiles (${t.threads})`,
      p.below_threshold ? ` · ${p.below_threshold} below threshold` : '',
      p.hidden ? ` · ${p.hidden} hidden` : '',
      p.beyond_top ? ` · ${p.beyond_top} beyond top` : '',
      (this.warnings || []).map((w) => el('div.warning', { text: `warning: ${w}` })));
    this.host.replaceChildren(summary, el('table.tree', {}, el('thead', {}, head), body));
  }

  row(e, depth) {
    const n = e.n;
    const t = this.tree;
    const toggle = this.hasChildren(e)
      ? el('span.toggle', { text: e.open ? '▾' : '▸', onclick: (ev) => { ev.stopPropagation(); this.toggle(n.id).catch((e) => this.fail(e)); } })
      : el('span.toggle.leaf', { text: '·' });
    const name = el('td.name', { style: `padding-left:${4 + depth * 14}px` }, toggle,
      el(`span.label.kind-${n.kind}`, { text: nodeLabel(n), title: n.name }),
      place(n) && n.kind !== 'statement' ? el('span.place', { text: place(n) }) : null,
      el('span.vid', { text: `#${n.id}` }),
      n.imbalanced ? el('span.mark.imb', { text: '!', title: 'below the threshold, shown because one thread exceeds it' }) : null);
    const cells = t.columns.map((c) => {
      const v = n.values[c.title];
      const pct = n.percent ? n.percent[c.title] : null;
      const noisy = (n.within_sampling_error || []).includes(c.title);
      const err = n.sampling_error ? n.sampling_error[c.title] : undefined;
      return el('td.num', { title: err !== undefined ? `± ${fmtValue(err, c.unit)} (sampling error bound)` : null },
        pct !== null && pct !== undefined ? el('div.bar', { style: `width:${Math.max(0, Math.min(100, pct))}%` }) : null,
        el('span.v', { text: fmtValue(v, c.unit) }),
        pct !== null && pct !== undefined ? el('span.pct', { text: fmtPercent(pct) }) : null,
        noisy ? el('span.mark', { text: '~', title: 'within sampling error' }) : null);
    });
    const tr = el(`tr.row${this.selected === n.id ? '.selected' : ''}`, { 'data-id': n.id, 'data-kind': n.kind, onclick: () => this.select(n.id), ondblclick: () => this.toggle(n.id).catch((e) => this.fail(e)) },
      name, cells);
    this.decorate(tr, n, t);
    return tr;
  }
}
