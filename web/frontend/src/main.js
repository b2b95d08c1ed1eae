// CSP's web viewer: panels of databases (several side by side), each with the views of
// csp-views, a flame graph, the per-thread plot of the selected node, the source pane, the
// scaling-loss report of a csp-diff database, imbalance causes, effort, the region timeline and
// the cost functions and footprints of memory-access profiles.
// Every number comes from the server's JSON API (the presentation layer); nothing is computed
// here but layout.
import { api, isReport } from './api.js';
import { el, message } from './util.js';
import { TreeTable } from './tree.js';
import { ThreadPlot } from './threads.js';
import { Flame, FLAME_DEPTH } from './flame.js';
import { SourcePane } from './source.js';
import { Timeline } from './timeline.js';
import { MemoryPage } from './memory.js';
import { imbalancePage, diffPage, diffDecorator, effortDecorator, infoPage } from './reports.js';

const TABS = [
  ['cc', 'Calling Context'], ['callers', 'Callers'], ['flat', 'Flat'], ['flame', 'Flame graph'], ['loss', 'Scaling loss'],
  ['imbalance', 'Imbalance'], ['effort', 'Effort'], ['regions', 'Regions'], ['timeline', 'Timeline'], ['memory', 'Memory'], ['info', 'Info'],
];

class Panel {
  constructor(app, dbIndex) {
    this.app = app;
    this.tab = null;
    this.settings = { metric: '', stat: '', sort: '', threads: '', threshold: '', keep: '', hide: '', focus: '' };
    this.root = el('section.panel');
    this.setDatabase(dbIndex);
  }

  get db() { return this.database.index; }

  setDatabase(index) {
    this.database = this.app.databases[index];
    this.settings = { metric: '', stat: '', sort: '', threads: '', threshold: '', keep: '', hide: '', focus: '' };
    this.build();
    this.open(this.database.diff ? 'loss' : 'cc');
  }

  available(tab) {
    const d = this.database;
    const metrics = new Set(d.metrics.map((m) => m.name));
    switch (tab) {
      case 'loss': return d.diff;
      case 'imbalance': return !d.diff;
      case 'effort': return metrics.has('work') && metrics.has('idleness');
      case 'regions': return d.regions;
      case 'timeline': return d.region_logs;
      case 'memory': return metrics.has('mem-calls');
      default: return true;
    }
  }

  build() {
    const d = this.database;
    const dbSelect = el('select.db', { onchange: (e) => this.setDatabase(Number(e.target.value)) },
      this.app.databases.map((x) => el('option', { value: x.index, selected: x.index === d.index }, `${x.index}: ${x.title}${x.diff ? ' (scaling loss)' : ''}`)));
    this.tabs = el('nav.tabs', {}, TABS.filter(([t]) => this.available(t)).map(([t, label]) =>
      el('button.tab', { 'data-tab': t, text: label, onclick: () => this.open(t) })));
    const s = this.settings;
    const input = (key, attrs) => {
      const i = el('input', { ...attrs, value: s[key] });
      i.addEventListener('change', () => { s[key] = i.value.trim(); this.refresh(); });
      return i;
    };
    this.metricSelect = el('select.metric', { onchange: (e) => { s.metric = e.target.value; this.refresh(); } },
      el('option', { value: '' }, 'default metric'), d.metrics.map((m) => el('option', { value: m.name }, `${m.name}${m.unit ? ` (${m.unit})` : ''}`)));
    const threads = el('select.threads', { onchange: (e) => { s.threads = e.target.value; this.refresh(); } },
      ['', 'all', 'work', 'main', 'worker', 'helper'].map((t) => el('option', { value: t }, t || 'default threads')));
    this.search = input('keep', { type: 'search', class: 'search', placeholder: 'search procedure (keep)…', size: 22 });
    this.focusBox = el('span.focus');
    this.toolbar = el('div.toolbar', {}, dbSelect, this.metricSelect, threads,
      input('stat', { placeholder: 'statistics: sum,mean,max,imbalance…', size: 18, class: 'stat', title: 'csp-views -s: sum mean min max stddev cfvar imbalance count p5 p25 p50 p75 p95 imbmedian' }),
      input('sort', { placeholder: 'sort [metric:]stat[:scope]', size: 14, class: 'sort', title: 'csp-views --sort, or name' }),
      el('label', {}, ' threshold % ', input('threshold', { type: 'number', min: 0, max: 100, step: 0.1, placeholder: '1', class: 'threshold', size: 4 })),
      ' ', this.search, ' ', input('hide', { placeholder: 'hide (glob)…', size: 12, class: 'hide' }), ' ', this.focusBox);
    this.main = el('div.main');
    this.side = el('aside.side', {}, message('Select a node to see its value per thread.'));
    this.sourceHost = el('div.source', { hidden: true });
    this.source = new SourcePane(this.sourceHost);
    this.root.replaceChildren(this.tabs, this.toolbar, el('div.body', {}, el('div.left', {}, this.main, this.sourceHost), this.side));
  }

  params(extra = {}) {
    const s = this.settings;
    return { db: this.db, metric: s.metric || undefined, stat: s.stat || undefined, sort: s.sort || undefined, threads: s.threads || undefined, threshold: s.threshold || undefined,
      keep: s.keep || undefined, hide: s.hide || undefined, focus: s.focus || undefined, ...extra };
  }

  refresh() { this.open(this.tab); }

  open(tab) {
    this.tab = tab;
    this.sourceHost.hidden = true;
    for (const b of this.tabs.querySelectorAll('button.tab')) b.classList.toggle('on', b.dataset.tab === tab);
    this.focusBox.replaceChildren(this.settings.focus
      ? el('span', {}, `focus #${this.settings.focus} `, el('button', { text: '× unfocus', onclick: () => { this.settings.focus = ''; this.refresh(); } })) : '');
    this.main.dataset.tab = tab;
    const show = {
      cc: () => this.treeTab('cc'), callers: () => this.treeTab('callers'), flat: () => this.treeTab('flat'),
      regions: () => this.treeTab('regions'), flame: () => this.flameTab(), loss: () => this.lossTab(),
      imbalance: () => this.imbalanceTab(), effort: () => this.effortTab(), timeline: () => this.timelineTab(), info: () => this.infoTab(),
      memory: () => this.memoryTab(),
    }[tab];
    show().catch((e) => this.main.replaceChildren(el('div.error', { text: e.message })));
  }

  // A tree of a view, opened node by node.
  async treeTab(kind, { extra = {}, decorate, host = null, extraHeader } = {}) {
    const target = host || this.main;
    const tools = el('div.tree-tools', {},
      el('button.hot', { text: 'expand hottest path', onclick: () => this.tree.expandHotPath().then(() => { table.dataset.hotPath = 'open'; }).catch((e) => this.tree.fail(e)) }));
    const table = el('div.tree-host', { 'data-keep': this.settings.keep });
    target.replaceChildren(tools, table);
    const searching = Boolean(this.settings.keep);
    const base = this.params(); // this tree's database and settings, whatever the panel shows later
    this.tree = new TreeTable(table, {
      fetchTop: () => api('/api/view', { ...base, kind, depth: searching ? undefined : 1, ...extra }),
      fetchChildren: (id) => (extra.effort
        ? api('/api/view', { ...base, kind, focus: id, depth: 1, keep: undefined, ...extra })
        : api('/api/children', { ...base, kind, id, focus: undefined, ...extra })),
      onSelect: (n) => this.selected(n, kind, base.db),
      decorate,
      extraHeader,
    });
    this.treeKind = kind;
    await this.tree.load();
  }

  // The side pane of a selected node: actions and its per-thread plot.
  selected(n, kind, db = this.db) {
    const actions = el('div.actions', {},
      kind !== 'regions' && n.kind !== 'root' ? el('button', { text: 'focus here', onclick: () => { this.settings.focus = String(n.id); this.refresh(); } }) : null,
      n.kind !== 'root' && n.name ? el('button', { text: `hide ${n.name.slice(0, 24)}`, onclick: () => { this.settings.hide = n.name; this.refresh(); } }) : null,
      kind === 'cc' && n.kind !== 'root' ? el('button', { text: 'flame graph from here', onclick: () => { this.flameFocus = n.id; this.open('flame'); } }) : null,
      n.file ? el('button.source-btn', { text: `source ${n.file.split('/').pop()}${n.line ? `:${n.line}` : ''}`, onclick: () => this.openSource(n, db) }) : null);
    const plotHost = el('div.plot');
    this.side.replaceChildren(actions, plotHost);
    if (kind === 'regions') {
      plotHost.append(message('Regions have no per-thread plot here (csp-views --regions shows their statistics).'));
      return;
    }
    this.plot = new ThreadPlot(plotHost, { onContext: (id) => this.showContext(id) });
    this.plot.show({ db, kind, spec: String(n.id), metric: this.settings.metric || undefined, threads: this.settings.threads || undefined });
  }

  openSource(n, db) {
    this.source.show({ db, file: n.file, metric: this.settings.metric || undefined, threads: this.settings.threads || undefined }, n.line);
  }

  // A context named by a CCT id elsewhere (a thread's top contexts, an imbalance cause, a loss row).
  showContext(id) {
    this.settings.focus = String(id);
    this.settings.keep = '';
    this.open('cc');
  }

  async flameTab() {
    const host = el('div.flame-host');
    this.main.replaceChildren(host);
    const flame = new Flame(host, {
      fetch: (focus, kind) => api('/api/view', this.params({ kind, depth: FLAME_DEPTH, stat: ['sum', 'imbalance'], scope: kind === 'callers' ? 'exclusive' : 'inclusive', focus: focus === undefined ? undefined : String(focus), keep: undefined })),
      onSelect: () => {},
    });
    const start = this.flameFocus ?? (this.settings.focus || undefined);
    this.flameFocus = undefined;
    if (start !== undefined) flame.stack.push(start);
    await flame.load(start);
  }

  async lossTab() {
    const page = el('div.loss-page');
    const treeHost = el('div.loss-tree');
    this.main.replaceChildren(page, treeHost);
    let report = null;
    try {
      report = (await api('/api/diff', { db: this.db, top: 20 })).answer;
      page.replaceChildren(diffPage(report, (id) => this.showContext(id)));
    } catch (e) {
      page.replaceChildren(el('div.error', { text: e.message }));
    }
    await this.treeTab('cc', { extra: { metric: ['loss', 'excess', 'noise'], scope: 'inclusive' }, decorate: diffDecorator(report), host: treeHost });
  }

  async imbalanceTab() {
    this.main.replaceChildren(el('div.loading', { text: 'analysing the load imbalance…' }));
    const { answer } = await api('/api/imbalance', { db: this.db, metric: this.settings.metric || undefined, threads: this.settings.threads || undefined });
    this.main.replaceChildren(imbalancePage(answer, (id) => this.showContext(id)));
  }

  async effortTab() {
    await this.treeTab('cc', { extra: { effort: 1 }, decorate: effortDecorator, extraHeader: 'effort: work · overhead · idleness (Fig. 5.1 reading)' });
  }

  async timelineTab() {
    const host = el('div.timeline-host');
    this.main.replaceChildren(host);
    this.timeline = new Timeline(host, this.db);
    await this.timeline.load();
  }

  async memoryTab() {
    const host = el('div.page.memory-page');
    this.main.replaceChildren(host);
    await new MemoryPage(host, this.db).load();
  }

  async infoTab() {
    const { answer } = await api('/api/info', { db: this.db });
    this.main.replaceChildren(infoPage(answer));
  }
}

class App {
  async start() {
    const root = document.getElementById('app');
    try {
      this.databases = (await api('/api/databases')).answer;
    } catch (e) {
      root.replaceChildren(el('div.error', { text: `cannot list the databases: ${e.message}` }));
      return;
    }
    this.panels = el('div.panels');
    const add = el('button.add', { text: '+ side by side', title: 'another panel, for another database or view', onclick: () => this.addPanel() });
    const remove = el('button.remove', { text: '−', title: 'close the last panel', onclick: () => { if (this.panels.children.length > 1) this.panels.lastChild.remove(); } });
    root.replaceChildren(el('header', {}, el('b', { text: 'CSP' }), ` ${this.databases.length} database${this.databases.length > 1 ? 's' : ''}${isReport() ? ' · report (csp-web --html)' : ''} `, add, remove), this.panels);
    this.addPanel();
  }

  addPanel() {
    const n = this.panels.children.length;
    const panel = new Panel(this, Math.min(n, this.databases.length - 1));
    this.panels.append(panel.root);
    window.cspPanels = [...(window.cspPanels || []), panel];
  }
}

new App().start();
