// Small DOM, number and colour helpers shared by the panes.
import { format } from 'd3-format';
import { interpolateYlOrRd, interpolateRdBu, schemeTableau10 } from 'd3-scale-chromatic';

// el('div.cls#id', {attr: v, onclick: f}, children...)
export function el(spec, attrs = {}, ...children) {
  const [tagAndId, ...classes] = spec.split('.');
  const [tag, id] = tagAndId.split('#');
  const node = document.createElement(tag || 'div');
  if (id) node.id = id;
  if (classes.length) node.className = classes.join(' ');
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else if (k === 'text') node.textContent = v;
    else if (k === 'style') node.style.cssText = v;
    else node.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) node.append(c instanceof Node ? c : String(c));
  return node;
}

const SVG = 'http://www.w3.org/2000/svg';
export function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null) continue;
    if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else if (k === 'text') node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const c of children.flat()) if (c) node.append(c);
  return node;
}

const si = format('.3~s');
const fixed = format(',.4~r');
// A value with its unit, short: 1.23G ns -> "1.23 s" for time units.
export function fmtValue(v, unit = '') {
  if (v === null || v === undefined || Number.isNaN(v)) return '–';
  if (unit === 'ns') return fmtDuration(v);
  if (Math.abs(v) < 1000 && Number.isInteger(v)) return String(v) + (unit ? ` ${unit}` : '');
  return (Math.abs(v) >= 1e4 ? si(v) : fixed(v)) + (unit ? ` ${unit}` : '');
}

export function fmtDuration(ns) {
  if (ns === null || ns === undefined || Number.isNaN(ns)) return '–';
  const a = Math.abs(ns);
  if (a >= 1e9) return `${format('.4~r')(ns / 1e9)} s`;
  if (a >= 1e6) return `${format('.4~r')(ns / 1e6)} ms`;
  if (a >= 1e3) return `${format('.4~r')(ns / 1e3)} µs`;
  return `${Math.round(ns)} ns`;
}

export const fmtPercent = (p) => (p === null || p === undefined || Number.isNaN(p) ? '' : `${p.toFixed(p >= 10 ? 1 : 2)} %`);

// Heat of a share (0..1): pale yellow to dark red.
export const heat = (share) => interpolateYlOrRd(0.08 + 0.85 * Math.max(0, Math.min(1, share)));
// Loss (red) and gain (blue) of a scaling-loss share in -1..1.
export const lossColour = (s) => interpolateRdBu(0.5 - 0.5 * Math.max(-1, Math.min(1, s)));
export const classColour = { main: '#4e79a7', worker: '#59a14f', helper: '#b07aa1', '': '#4e79a7' };

// A stable colour per name (regions on the timeline).
export function nameColour(name) {
  let h = 0;
  for (const ch of name) h = (h * 31 + ch.codePointAt(0)) >>> 0;
  return schemeTableau10[h % schemeTableau10.length];
}

// "solve (solve.c:40)" style label of a view node.
export function nodeLabel(n) {
  const base = (f) => (f ? f.split('/').pop() : '');
  switch (n.kind) {
    case 'root': return '<program root>';
    case 'loop': return n.name || `loop ${base(n.file)}:${n.line}`;
    case 'callsite': return `call ${n.name || `${base(n.file)}:${n.line}`}`;
    case 'statement': return n.name || `${base(n.file)}:${n.line}`;
    default: return n.name || '?';
  }
}

export function place(n) {
  if (!n.file) return '';
  const f = n.file.split('/').pop();
  return n.line ? `${f}:${n.line}` : f;
}

export function message(text, cls = 'note') {
  return el(`div.${cls}`, { text });
}
