// The runs list: `GET /v1/runs?order=newest`, keyset paging with
// `before`, filters by state, flow and run id prefix, kept live by the
// state feed (runs started by the CLI on the same store included).

import {api} from './api.js';
import {fill, h, onState, problemText, shortHash, shortRun, stateBadge, time} from './ui.js';

const STATES = ['', 'running', 'paused', 'completed', 'faulted', 'halted'];

export function mount(root, params) {
  const f = {
    state: params.get('state') || '',
    flow: params.get('flow') || '',
    q: params.get('q') || '',
  };
  const rows = new Map(); // run id → row
  const flows = new Map(); // flow id → name
  let order = []; // run ids, newest first
  let next = null;
  let loading = false;
  let gen = 0;

  const status = h('p', {class: 'status', role: 'status', 'aria-live': 'polite'});
  const tbody = h('tbody');
  const more = h('button', {type: 'button', class: 'btn-quiet', onclick: () => load(false)}, 'Load older runs');
  const flowSel = h('select', {id: 'f-flow', onchange: (e) => { f.flow = e.target.value; apply(); }});
  const stateSel = h('select', {id: 'f-state', onchange: (e) => { f.state = e.target.value; apply(); }},
    STATES.map((s) => h('option', {value: s, selected: s === f.state}, s || 'any state')));
  const search = h('input', {
    id: 'f-q', type: 'search', value: f.q, placeholder: 'run-01m8…', autocomplete: 'off',
    spellcheck: 'false', 'aria-describedby': 'f-q-hint',
  });
  let searchTimer = 0;
  search.addEventListener('input', () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => { f.q = search.value.trim(); apply(); }, 250);
  });

  fill(root,
    h('div', {class: 'page-head'},
      h('h1', {}, 'Runs'),
      h('a', {class: 'btn', href: '#/start'}, 'Start a run')),
    h('form', {class: 'filters', role: 'search', 'aria-label': 'Filter runs', onsubmit: (e) => e.preventDefault()},
      h('label', {for: 'f-state'}, 'State'), stateSel,
      h('label', {for: 'f-flow'}, 'Flow'), flowSel,
      h('label', {for: 'f-q'}, 'Run id'), search,
      h('span', {id: 'f-q-hint', class: 'hint'}, 'starts with')),
    status,
    h('div', {class: 'table-wrap'},
      h('table', {class: 'runs'},
        h('caption', {class: 'sr-only'}, 'Runs, newest first'),
        h('thead', {}, h('tr', {},
          ['Run', 'Flow', 'State', 'Entry', 'Started', 'Last fact', 'Lineage'].map((c) => h('th', {scope: 'col'}, c)))),
        tbody)),
    h('p', {class: 'more'}, more));

  function flowOptions() {
    const opts = [['', 'any flow'], ...[...flows].sort().map(([id, name]) => [id, name ? `${name} (${id})` : id])];
    if (f.flow && !flows.has(f.flow)) opts.push([f.flow, f.flow]);
    fill(flowSel, opts.map(([v, t]) => h('option', {value: v, selected: v === f.flow}, t)));
  }

  function query(before) {
    const p = new URLSearchParams({order: 'newest', limit: '50'});
    if (f.state) p.set('state', f.state);
    if (f.flow) p.set('flow', f.flow);
    if (f.q) p.set('prefix', f.q.startsWith('run-') ? f.q : `run-${f.q}`);
    if (before) p.set('before', before);
    return `/v1/runs?${p}`;
  }

  function apply() {
    const p = new URLSearchParams();
    for (const k of ['state', 'flow', 'q']) if (f[k]) p.set(k, f[k]);
    const hash = `#/${p.toString() ? `?${p}` : ''}`;
    history.replaceState(null, '', hash);
    load(true);
  }

  async function load(reset) {
    if (loading && !reset) return;
    const my = ++gen;
    loading = true;
    status.textContent = 'Loading…';
    try {
      const v = await api(query(reset ? null : next));
      if (my !== gen) return;
      if (reset) { rows.clear(); order = []; }
      for (const r of v.runs) {
        if (!rows.has(r.run)) order.push(r.run);
        rows.set(r.run, r);
        if (r.flow && r.flow.id) flows.set(r.flow.id, r.flow.name || '');
      }
      next = v.nextBefore;
      render();
    } catch (e) {
      if (my === gen) status.textContent = problemText(e);
    } finally {
      if (my === gen) loading = false;
    }
  }

  function rowEl(r) {
    const lineage = [];
    if (r.parent) lineage.push(h('a', {href: `#/run/${r.parent.run}`, title: r.parent.run}, `fork of ${shortRun(r.parent.run)} @${r.parent.checkpoint}`));
    if (r.outer) lineage.push(h('a', {href: `#/run/${r.outer.run}`, title: r.outer.run}, `nested in ${shortRun(r.outer.run)}`));
    const flow = r.flow ? (r.flow.name || r.flow.id || '') : '';
    return h('tr', {dataset: {run: r.run}},
      h('td', {}, h('a', {href: `#/run/${r.run}`, class: 'mono'}, r.run)),
      h('td', {}, flow, r.flow && r.flow.id && r.flow.name ? h('span', {class: 'sub mono'}, r.flow.id) : null),
      h('td', {}, stateBadge(r.state)),
      h('td', {class: 'mono'}, r.entry ? `${r.entry.module}#${r.entry.function}` : ''),
      h('td', {}, h('time', {datetime: new Date(r.createdMs).toISOString()}, time(r.createdMs))),
      h('td', {class: 'mono nowrap'}, r.lastFact ? `${r.lastFact.n} · ${shortHash(r.lastFact.hash)}` : ''),
      h('td', {}, lineage.length ? lineage : '—'));
  }

  function render() {
    fill(tbody, order.map((id) => rowEl(rows.get(id))));
    more.hidden = !next;
    flowOptions();
    status.textContent = order.length ? `${order.length} run${order.length === 1 ? '' : 's'} shown` : 'No runs match.';
  }

  function matches(r) {
    if (f.state && r.state !== f.state) return false;
    if (f.flow && !(r.flow && r.flow.id === f.flow)) return false;
    if (f.q && !r.run.startsWith(f.q.startsWith('run-') ? f.q : `run-${f.q}`)) return false;
    return true;
  }

  // Live: a changed row is re-read (one indexed lookup by its id) and put
  // where it belongs; a new run goes on top.
  const pending = new Set();
  let timer = 0;
  async function refreshRows() {
    const ids = [...pending];
    pending.clear();
    for (const id of ids) {
      try {
        const v = await api(`/v1/runs?prefix=${encodeURIComponent(id)}&limit=1`);
        const r = v.runs[0];
        if (!r) continue;
        if (r.flow && r.flow.id) flows.set(r.flow.id, r.flow.name || '');
        const known = rows.has(r.run);
        if (!matches(r)) {
          if (known) { rows.delete(r.run); order = order.filter((x) => x !== r.run); }
          continue;
        }
        rows.set(r.run, r);
        if (!known) {
          // Newest first: ids are creation-ordered.
          order.push(r.run);
          order.sort((a, b) => (a < b ? 1 : a > b ? -1 : 0));
        }
      } catch { /* the next change retries */ }
    }
    render();
  }
  const off = onState((d) => {
    if (d.resync) { load(true); return; }
    if (!d.run) return;
    pending.add(d.run);
    clearTimeout(timer);
    timer = setTimeout(refreshRows, 100);
  });

  load(true);
  return {dispose() { off(); clearTimeout(timer); clearTimeout(searchTimer); gen++; }};
}
