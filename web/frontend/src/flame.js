// Flame graph (icicle, root on top) of the Calling Context or Callers view: the view's nodes to a
// depth, pruned by the same threshold as the tables, widths by the first (inclusive sum) column.
// A click zooms: the view re-rooted at that node (--focus). Coloured by the node's share of the
// metric or by its imbalance statistic.
import { el, svg, fmtValue, fmtPercent, heat, nodeLabel, place } from './util.js';

const ROW = 18;
export const FLAME_DEPTH = 32;

export class Flame {
  constructor(host, { fetch, onSelect }) {
    this.host = host;
    this.fetch = fetch; // (focus, kind) -> ViewTree answer with columns [sum, imbalance]
    this.kind = 'cc'; // or 'callers': bottom-up, the procedures' own (exclusive) cost split by caller chains
    this.onSelect = onSelect || (() => {});
    this.colour = 'share';
    this.stack = []; // zoomed-into ids
  }

  async load(focus) {
    this.host.replaceChildren(el('div.loading', { text: 'loading…' }));
    try {
      const { answer } = await this.fetch(focus, this.kind);
      this.tree = answer;
      this.render();
    } catch (e) {
      this.host.replaceChildren(el('div.note', { text: `flame graph: ${e.message}` }));
    }
  }

  // Nodes as a tree, call sites folded into their callee (they repeat it).
  layout() {
    const t = this.tree;
    const weight = t.columns[0].title;
    const imb = t.columns.find((c) => c.statistic === 'imbalance');
    const byId = new Map();
    const kids = new Map();
    const roots = [];
    for (const n of t.nodes) {
      byId.set(n.id, n);
      kids.set(n.id, []);
    }
    const shownParent = (n) => {
      let p = byId.get(n.parent);
      while (p && p.kind === 'callsite') p = byId.get(p.parent);
      return p;
    };
    for (const n of t.nodes) {
      if (n.kind === 'callsite') continue;
      const p = shownParent(n);
      if (p) kids.get(p.id).push(n);
      else roots.push(n);
    }
    const w = (n) => Math.max(n.values[weight] || 0, 0);
    const total = roots.reduce((s, n) => s + w(n), 0) || 1;
    const frames = [];
    let depth = 0;
    const place = (n, x, level) => {
      // Own share: what the node holds beyond its shown children (its own cost and pruned ones).
      const own = Math.max(w(n) - kids.get(n.id).reduce((sum, c) => sum + w(c), 0), 0) / total;
      frames.push({ n, x, level, width: w(n) / total, own, imbalance: imb ? n.values[imb.title] : null });
      depth = Math.max(depth, level + 1);
      let cx = x;
      for (const c of kids.get(n.id)) {
        place(c, cx, level + 1);
        cx += w(c) / total;
      }
    };
    let x = 0;
    for (const r of roots) {
      place(r, x, 0);
      x += w(r) / total;
    }
    return { frames, depth, weight, total };
  }

  render() {
    const { frames, depth, total } = this.layout();
    const width = Math.max(this.host.clientWidth - 8, 600);
    const maxOwn = Math.max(...frames.map((f) => f.own), 1e-12);
    // Imbalance is max / mean: 1 is balanced.
    const maxImb = Math.max(...frames.map((f) => f.imbalance || 1), 1 + 1e-9);
    const chart = svg('svg', { width, height: depth * ROW + 4, class: 'flame', 'data-frames': frames.length });
    const unit = this.tree.columns[0].unit;
    for (const f of frames) {
      const w = f.width * width;
      if (w < 0.5) continue;
      const level = this.colour === 'imbalance' ? ((f.imbalance || 1) - 1) / (maxImb - 1) : f.own / maxOwn;
      const fill = heat(0.75 * level);
      const g = svg('g', { transform: `translate(${f.x * width},${f.level * ROW})`, class: 'frame', 'data-id': f.n.id,
        onclick: () => this.zoom(f.n), onmouseenter: () => this.onSelect(f.n, this.tree, true) },
      svg('rect', { width: Math.max(w - 1, 0.5), height: ROW - 1, fill }),
      svg('title', { text: `${nodeLabel(f.n)} ${place(f.n)}\n${fmtValue(f.n.values[this.tree.columns[0].title], unit)} (${fmtPercent(100 * f.width)} of the shown root, own ${fmtPercent(100 * f.own)})${f.imbalance !== null ? `\nimbalance ${f.imbalance.toFixed(3)}` : ''}` }));
      if (w > 30) g.append(svg('text', { x: 3, y: ROW - 5, text: clip(nodeLabel(f.n), w) }));
      chart.append(g);
    }
    const controls = el('div.flame-controls', {},
      el('button', { text: '⟲ whole program', disabled: this.stack.length === 0, onclick: () => { this.stack = []; this.load(undefined); } }),
      el('button', { text: '↑ up', disabled: this.stack.length === 0, onclick: () => { this.stack.pop(); this.load(this.stack[this.stack.length - 1]); } }),
      ' view ',
      el('select.flame-kind', { onchange: (e) => { this.kind = e.target.value; this.stack = []; this.load(undefined); } },
        el('option', { value: 'cc', selected: this.kind === 'cc' }, 'calling context (top-down)'),
        el('option', { value: 'callers', selected: this.kind === 'callers' }, 'callers (bottom-up, exclusive)')),
      ' colour by ',
      el('select', { onchange: (e) => { this.colour = e.target.value; this.render(); } },
        el('option', { value: 'share', selected: this.colour === 'share' }, 'own share of the metric'),
        el('option', { value: 'imbalance', selected: this.colour === 'imbalance' }, 'imbalance (max / mean)')),
      el('span.note', { text: ` ${frames.length} frames to depth ${FLAME_DEPTH}; nodes below the threshold are left out (empty space) · click to zoom · total ${fmtValue(total, unit)}` }));
    this.host.replaceChildren(controls, chart);
  }

  zoom(n) {
    // Callers chains have no id that --focus takes: only the procedures at the top.
    if (n.kind === 'root' || (this.kind === 'callers' && n.parent !== -1)) return;
    this.stack.push(n.id);
    this.load(n.id);
  }
}

function clip(text, width) {
  const chars = Math.floor((width - 6) / 6.5);
  return text.length <= chars ? text : `${text.slice(0, Math.max(chars - 1, 1))}…`;
}
