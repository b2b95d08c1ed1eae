// The source pane: a file the database records, with its lines' costs from the Flat view
// (statements' own cost, calls made on the line, loops marked), when the server can read it.
import { el, fmtValue, heat } from './util.js';
import { api } from './api.js';

export class SourcePane {
  constructor(host) {
    this.host = host;
  }

  async show(params, line) {
    this.host.hidden = false;
    this.host.replaceChildren(el('div.loading', { text: `source of ${params.file}…` }));
    try {
      const { answer, warnings } = await api('/api/source', params);
      this.render(answer, warnings, line);
    } catch (e) {
      this.host.replaceChildren(this.header(params.file), el('div.note', { text: e.message }));
    }
  }

  header(file) {
    return el('div.src-head', {}, el('b', { text: file }), el('button.close', { text: '×', onclick: () => { this.host.hidden = true; } }));
  }

  // Per line: own cost (statements, exclusive), calls (call sites, inclusive), loop headers.
  costs(s) {
    const ex = s.columns.findIndex((c) => c.scope === 'exclusive');
    const inc = s.columns.findIndex((c) => c.scope === 'inclusive');
    const lines = new Map();
    for (const r of s.lines) {
      const l = lines.get(r.line) || { self: 0, calls: 0, loop: null, procedures: [], scope: 0 };
      const inclusive = inc >= 0 ? r.values[inc] || 0 : 0;
      if (r.kind === 'statement' && ex >= 0) l.self += r.values[ex] || 0;
      if (r.kind === 'callsite') l.calls += inclusive;
      if (r.kind === 'loop') l.loop = inclusive;
      if (r.kind === 'procedure' || r.kind === 'inlined') l.procedures.push(r.name);
      if (r.kind !== 'statement' && r.kind !== 'callsite') l.scope = Math.max(l.scope, inclusive);
      lines.set(r.line, l);
    }
    return { lines, unit: (s.columns[0] || {}).unit || '' };
  }

  render(s, warnings, focusLine) {
    const { lines, unit } = this.costs(s);
    const max = Math.max(...[...lines.values()].map((l) => l.self + l.calls), 1e-300);
    const mark = (n, l) => {
      const c = l ? l.self + l.calls : 0;
      return [
        el('td.src-no', { text: n }),
        el('td.src-cost', { style: c > 0 ? `background:${heat(c / max)}` : '', title: l ? `own ${fmtValue(l.self, unit)}, calls ${fmtValue(l.calls, unit)}, scope starting here ${fmtValue(l.scope, unit)} inclusive` : '' },
          c > 0 ? fmtValue(c, unit) : l && l.scope > 0 ? el('span.scope-cost', { text: `(${fmtValue(l.scope, unit)})` }) : ''),
        el('td.src-mark', {}, l && l.loop !== null ? el('span.loop', { text: '⟳', title: `loop header: ${fmtValue(l.loop, unit)} inclusive` }) : '',
          l && l.procedures.length ? el('span.proc', { text: 'ƒ', title: l.procedures.join(', ') }) : ''),
      ];
    };
    const body = el('tbody');
    if (s.readable) {
      const text = s.text.split('\n');
      text.forEach((t, i) => {
        const n = i + 1;
        body.append(el(`tr.src-line${n === focusLine ? '.focus' : ''}${lines.has(n) ? '.costly' : ''}`, { 'data-line': n }, mark(n, lines.get(n)), el('td.src-text', { text: t })));
      });
    } else {
      for (const [n, l] of [...lines.entries()].sort((a, b) => a[0] - b[0]))
        body.append(el(`tr.src-line${n === focusLine ? '.focus' : ''}.costly`, { 'data-line': n }, mark(n, l), el('td.src-text', { text: '' })));
    }
    const note = s.readable ? null
      : el('div.note.unreadable', { text: `The file is not readable on the machine serving this page (${s.reason}): only its lines' costs are shown.` });
    this.host.replaceChildren(...[this.header(s.file), note].filter(Boolean), ...(warnings || []).map((w) => el('div.warning', { text: w })),
      el('div.src-legend', { text: `cost: the line's own ${s.columns[0] ? s.columns[0].metric : ''} plus the calls made on it; (in brackets) a loop or procedure starting on the line, inclusive · ⟳ loop header · ƒ procedure` }),
      el('div.src-scroll', {}, el('table.src', { 'data-readable': s.readable ? 1 : 0 }, body)));
    const focus = this.host.querySelector('tr.focus');
    if (focus) focus.scrollIntoView({ block: 'center' });
  }
}
