// Timeline of regions: per process one lane per thread, the region visits of the window read from
// the stored event logs (the server reads only the log blocks the window needs), the frames of a
// csp-query query highlighted. Wheel zooms around the pointer, dragging pans.
import { el, fmtDuration, nameColour } from './util.js';
import { api, isReport } from './api.js';

const LEVEL = 7;
const LANE_GAP = 3;
const LABEL = 150;

export class Timeline {
  constructor(host, db) {
    this.host = host;
    this.db = db;
    this.from = 0;
    this.to = null;
    this.query = '';
    this.seq = 0;
    this.canvas = el('canvas.timeline');
    this.info = el('div.tl-info');
    this.tip = el('div.tooltip', { hidden: true });
    const q = el('input.tl-query', { placeholder: 'csp-query frames query, e.g. frames(t: in(t, "compute"))', size: 50 });
    q.addEventListener('keydown', (e) => { if (e.key === 'Enter') { this.query = q.value; this.load(); } });
    this.controls = el('div.tl-controls', {},
      el('button', { text: '+ zoom in', onclick: () => this.zoomBy(0.5, 0.5) }),
      el('button', { text: '− zoom out', onclick: () => this.zoomBy(2, 0.5) }),
      el('button', { text: '⟲ whole run', onclick: () => { this.from = 0; this.to = null; this.load(); } }),
      ' highlight ', q, el('button', { text: 'highlight', onclick: () => { this.query = q.value; this.load(); } }));
    this.host.replaceChildren(this.controls, this.info, el('div.tl-wrap', {}, this.canvas, this.tip));
    this.bind();
  }

  async load() {
    const seq = ++this.seq;
    // A report holds the whole run at 1000 pixels (csp-web --html).
    const px = isReport() ? 1000 : Math.max(this.host.clientWidth - LABEL - 20, 300);
    this.host.dataset.state = 'loading';
    try {
      const { answer, warnings } = await api('/api/timeline', { db: this.db, from: Math.round(this.from), to: this.to === null ? undefined : Math.round(this.to), px, q: this.query || undefined });
      if (seq !== this.seq) return;
      this.t = answer;
      this.from = answer.from;
      this.to = answer.to;
      this.warnings = warnings;
      this.draw(px);
      this.host.dataset.state = 'ready';
    } catch (e) {
      if (seq !== this.seq) return;
      this.info.replaceChildren(el('div.note', { text: `timeline: ${e.message}` }));
      this.host.dataset.state = 'error';
    }
  }

  laneHeight(lane) {
    const depth = lane.intervals.reduce((d, iv) => Math.max(d, iv[3] + 1), 1);
    return Math.max(depth * LEVEL, 11) + LANE_GAP;
  }

  draw(px) {
    const t = this.t;
    const span = Math.max(t.to - t.from, 1);
    const x = (ns) => LABEL + ((ns - t.from) / span) * px;
    let height = 4;
    for (const p of t.processes) height += 16 + p.lanes.reduce((h, l) => h + this.laneHeight(l), 0);
    const c = this.canvas;
    const ratio = window.devicePixelRatio || 1;
    c.width = (LABEL + px + 4) * ratio;
    c.height = height * ratio;
    c.style.width = `${LABEL + px + 4}px`;
    c.style.height = `${height}px`;
    const g = c.getContext('2d');
    g.scale(ratio, ratio);
    g.font = '11px sans-serif';
    g.clearRect(0, 0, LABEL + px + 4, height);
    this.hits = [];
    let y = 4;
    let intervals = 0;
    let events = 0;
    let lanes = 0;
    let frames = 0;
    for (const p of t.processes) {
      g.fillStyle = '#333';
      g.fillText(`${p.label}${p.frames_in_all ? ` · ${p.frames_in_all} frames match` : ''}`, 4, y + 11);
      y += 16;
      const top = y;
      for (const lane of p.lanes) {
        ++lanes;
        events += lane.events_read;
        const h = this.laneHeight(lane);
        g.fillStyle = '#555';
        g.fillText(`${lane.id}${lane.class ? ` (${lane.class})` : ''}`.slice(0, 24), 4, y + Math.min(h, 11));
        g.fillStyle = '#f4f4f4';
        g.fillRect(LABEL, y, px, h - LANE_GAP);
        for (const iv of lane.intervals) {
          const [b, e, region, depth, visits] = iv;
          const x0 = x(b);
          const w = Math.max(x(e) - x0, 1);
          const name = region ? t.regions[region] || `region ${region}` : 'several regions';
          g.fillStyle = region ? nameColour(name) : '#999';
          g.fillRect(x0, y + depth * LEVEL, w, LEVEL - 1);
          this.hits.push({ x0, x1: x0 + w, y0: y + depth * LEVEL, y1: y + (depth + 1) * LEVEL, name, b, e, visits, lane: lane.id });
          ++intervals;
        }
        y += h;
      }
      g.fillStyle = 'rgba(255, 200, 0, 0.28)';
      g.strokeStyle = 'rgba(200, 120, 0, 0.9)';
      for (const f of p.frames) {
        const x0 = Math.max(x(f.begin), LABEL);
        const x1 = Math.min(x(f.end), LABEL + px);
        if (x1 < x0) continue;
        g.fillRect(x0, top, Math.max(x1 - x0, 1), y - top);
        g.strokeRect(x0, top, Math.max(x1 - x0, 1), y - top);
        ++frames;
      }
    }
    Object.assign(c.dataset, { lanes, intervals, eventsRead: events, frames, from: t.from, to: t.to });
    const longest = Math.max(...t.processes.map((p) => p.duration), 0);
    this.info.replaceChildren(
      `window ${fmtDuration(t.from)} – ${fmtDuration(t.to)} of ${fmtDuration(longest)} · ${lanes} threads · ${intervals} intervals (visits shorter than ${fmtDuration(t.resolution)} merged, grey where of several regions) · ${events} events read`,
      t.query ? ` · highlighted: ${t.query} (${frames} frames in the window)` : '',
      (this.warnings || []).map((w) => el('div.warning', { text: `warning: ${w}` })));
  }

  zoomBy(factor, at) {
    if (!this.t) return;
    const span = this.to - this.from;
    const centre = this.from + span * at;
    const next = Math.max(span * factor, 1000);
    this.from = Math.max(0, centre - next * at);
    this.to = this.from + next;
    this.load();
  }

  bind() {
    const c = this.canvas;
    const pxOf = (ev) => ev.offsetX - LABEL;
    c.addEventListener('wheel', (ev) => {
      if (!this.t || pxOf(ev) < 0) return;
      ev.preventDefault();
      const px = c.clientWidth - LABEL - 4;
      this.zoomBy(ev.deltaY < 0 ? 0.7 : 1 / 0.7, Math.min(Math.max(pxOf(ev) / px, 0), 1));
    }, { passive: false });
    let drag = null;
    c.addEventListener('mousedown', (ev) => { drag = { x: ev.offsetX, from: this.from, to: this.to }; });
    window.addEventListener('mouseup', (ev) => {
      if (!drag || !this.t) return;
      const dx = ev.clientX - c.getBoundingClientRect().left - drag.x;
      const px = c.clientWidth - LABEL - 4;
      if (Math.abs(dx) > 3) {
        const shift = (-dx / px) * (drag.to - drag.from);
        this.from = Math.max(0, drag.from + shift);
        this.to = this.from + (drag.to - drag.from);
        this.load();
      }
      drag = null;
    });
    c.addEventListener('mousemove', (ev) => {
      const hit = (this.hits || []).find((h) => ev.offsetX >= h.x0 && ev.offsetX <= h.x1 && ev.offsetY >= h.y0 && ev.offsetY < h.y1);
      if (!hit) { this.tip.hidden = true; return; }
      this.tip.hidden = false;
      this.tip.style.left = `${ev.offsetX + 12}px`;
      this.tip.style.top = `${ev.offsetY + 12}px`;
      this.tip.textContent = `${hit.lane}: ${hit.name} ${fmtDuration(hit.b)} – ${fmtDuration(hit.e)} (${fmtDuration(hit.e - hit.b)})${hit.visits > 1 ? `, ${hit.visits} visits` : ''}`;
    });
  }
}
