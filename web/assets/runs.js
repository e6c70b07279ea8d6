// The runs list: `GET /v1/runs?order=newest`, keyset paging with
// `before`, the run query's filters (issue 38 item 1: state, flow and a
// search box for the rest — a run id prefix, `entry:`, `fault:`, `fork:`,
// `nested:`, `since:`/`until:` and search attributes `name=value`), counts
// by state in the state tabs, kept live by the state feed (runs started
// by the CLI on the same store included). Runs chosen with the checkboxes
// (or "select all shown") can be recovered onto a fixed program
// (recover.js, issue 39 §2).

import {api} from './api.js';
import {STATES, filterParams} from './bulk.js';
import {openRecover} from './recover.js';
import {fill, h, onState, problemText, shortHash, shortRun, stateBadge, time} from './ui.js';

export function mount(root, params) {
  const f = {
    state: params.get('state') || '',
    flow: params.get('flow') || '',
    q: params.get('q') || '',
  };
  const rows = new Map(); // run id → row
  const flows = new Map(); // flow id → name
  let order = []; // run ids, newest first
  const chosen = new Set(); // run ids ticked, among those shown
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
    id: 'f-q', type: 'search', value: f.q, placeholder: 'run-01m8…  customer=acme  fault:timeout  since:2026-12-01', autocomplete: 'off',
    spellcheck: 'false', 'aria-describedby': 'f-q-hint',
  });
  // State tabs with the counts of the same filters (the state filter
  // left out: what each tab would list).
  const tabs = h('div', {class: 'state-tabs', role: 'group', 'aria-label': 'Runs by state'});
  let counts = null;
  function renderTabs() {
    const by = counts ? counts.byState : {};
    const all = counts ? Object.values(by).reduce((a, b) => a + b, 0) : null;
    fill(tabs, STATES.map((s) => {
      const n = s ? by[s] : all;
      return h('button', {
        type: 'button', class: 'tab', 'aria-pressed': String(s === f.state), dataset: {state: s || 'any'},
        onclick: () => { f.state = s; stateSel.value = s; apply(); },
      }, s || 'all', ' ', h('span', {class: 'count'}, n === undefined || n === null ? '…' : String(n)));
    }));
  }
  // Multi-select: a box per row, one for every row shown, and what to do
  // with the runs chosen.
  const all = h('input', {type: 'checkbox', id: 'select-all', onchange: (e) => {
    for (const id of order) if (e.target.checked) chosen.add(id); else chosen.delete(id);
    render();
  }});
  const chosenText = h('span', {class: 'chosen', 'aria-live': 'polite'});
  const recoverBtn = h('button', {type: 'button', class: 'btn-quiet', disabled: true, title: 'Fork the chosen runs onto a fixed program (dry run first)',
    onclick: () => openRecover([...chosen], {onClose: () => load(true)})}, 'Recover…');
  const clearBtn = h('button', {type: 'button', class: 'btn-quiet', disabled: true, onclick: () => { chosen.clear(); render(); }}, 'Clear selection');
  function showChosen() {
    const shown = order.filter((id) => chosen.has(id)).length;
    all.checked = order.length > 0 && shown === order.length;
    all.indeterminate = shown > 0 && shown < order.length;
    chosenText.textContent = chosen.size ? `${chosen.size} selected` : 'none selected';
    recoverBtn.disabled = chosen.size === 0;
    clearBtn.disabled = chosen.size === 0;
  }
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
      h('label', {for: 'f-q'}, 'Search'), search,
      h('span', {id: 'f-q-hint', class: 'hint'}, 'a run id prefix; entry:, fault:, fork:, nested:, since:, until:; name=value for search attributes')),
    tabs,
    h('div', {class: 'bulk-bar', role: 'group', 'aria-label': 'Selected runs'},
      h('label', {class: 'field-check', for: 'select-all'}, all, ' Select all shown'), chosenText, recoverBtn, clearBtn),
    status,
    h('div', {class: 'table-wrap'},
      h('table', {class: 'runs'},
        h('caption', {class: 'sr-only'}, 'Runs, newest first'),
        h('thead', {}, h('tr', {}, h('th', {scope: 'col', class: 'pick'}, h('span', {class: 'sr-only'}, 'Chosen')),
          ['Run', 'Flow', 'State', 'Entry', 'Started', 'Took', 'Last fact', 'Lineage'].map((c) => h('th', {scope: 'col'}, c)))),
        tbody)),
    h('p', {class: 'more'}, more));

  function flowOptions() {
    const opts = [['', 'any flow'], ...[...flows].sort().map(([id, name]) => [id, name ? `${name} (${id})` : id])];
    if (f.flow && !flows.has(f.flow)) opts.push([f.flow, f.flow]);
    fill(flowSel, opts.map(([v, t]) => h('option', {value: v, selected: v === f.flow}, t)));
  }

  // The run query for the filters (null when the search box cannot be
  // read: its message is shown instead).
  function runQuery() {
    const {p, error} = filterParams(f);
    if (error) return {error};
    p.set('order', 'newest');
    return {p};
  }

  function query(before, extra = {}) {
    const {p, error} = runQuery();
    if (error) return {error};
    p.set('limit', '50');
    if (before) p.set('before', before);
    for (const [k, v] of Object.entries(extra)) p.set(k, v);
    return {url: `/v1/runs?${p}`};
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
      const q = query(reset ? null : next, reset ? {counts: 'true'} : {});
      if (q.error) {
        rows.clear(); order = []; next = null; counts = null;
        render();
        status.textContent = q.error;
        return;
      }
      const v = await api(q.url);
      if (my !== gen) return;
      if (v.counts) counts = v.counts;
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

  /** How long a run took from Start to its last change (its End, once it
   * ended), as `flow runs` writes it: `850ms`, `12.3s`, `4m05s`, `2h03m`,
   * `3d04h`. */
  function duration(r) {
    const ms = Math.max(0, r.updatedMs - r.createdMs);
    const s = Math.floor(ms / 1000);
    if (ms < 1000) return `${ms}ms`;
    if (ms < 60_000) return `${s}.${Math.floor((ms % 1000) / 100)}s`;
    if (ms < 3_600_000) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
    if (ms < 86_400_000) return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
    return `${Math.floor(s / 86_400)}d${String(Math.floor((s % 86_400) / 3600)).padStart(2, '0')}h`;
  }

  function rowEl(r) {
    const lineage = [];
    if (r.parent) lineage.push(h('a', {href: `#/run/${r.parent.run}`, title: r.parent.run}, `fork of ${shortRun(r.parent.run)} @${r.parent.checkpoint}`));
    if (r.outer) lineage.push(h('a', {href: `#/run/${r.outer.run}`, title: r.outer.run}, `nested in ${shortRun(r.outer.run)}`));
    const flow = r.flow ? (r.flow.name || r.flow.id || '') : '';
    const pick = h('input', {type: 'checkbox', 'aria-label': `Select ${r.run}`, checked: chosen.has(r.run), onchange: (e) => {
      if (e.target.checked) chosen.add(r.run); else chosen.delete(r.run);
      showChosen();
    }});
    return h('tr', {dataset: {run: r.run}},
      h('td', {class: 'pick'}, pick),
      h('td', {class: 'run-id'}, h('a', {href: `#/run/${r.run}`, class: 'mono'}, r.run)),
      h('td', {}, flow, r.flow && r.flow.id && r.flow.name ? h('span', {class: 'sub mono'}, r.flow.id) : null),
      h('td', {}, stateBadge(r.state)),
      h('td', {class: 'mono'}, r.entry ? `${r.entry.module}#${r.entry.function}` : ''),
      h('td', {}, h('time', {datetime: new Date(r.createdMs).toISOString()}, time(r.createdMs))),
      h('td', {class: 'nowrap duration', title: 'from Start to its last change (its End, once it ended)'}, duration(r)),
      h('td', {class: 'mono nowrap'}, r.lastFact ? `${r.lastFact.n} · ${shortHash(r.lastFact.hash)}` : ''),
      h('td', {}, lineage.length ? lineage : '—'));
  }

  function render() {
    // Only runs shown stay chosen: a filter that hides a run unchooses it.
    for (const id of [...chosen]) if (!rows.has(id)) chosen.delete(id);
    fill(tbody, order.map((id) => rowEl(rows.get(id))));
    showChosen();
    more.hidden = !next;
    flowOptions();
    renderTabs();
    status.textContent = order.length ? `${order.length} run${order.length === 1 ? '' : 's'} shown` : 'No runs match.';
  }

  // The counts again, once changes settle.
  let countTimer = 0;
  function recount() {
    clearTimeout(countTimer);
    countTimer = setTimeout(async () => {
      const q = query(null, {counts: 'true', limit: '1'});
      if (q.error) return;
      try { counts = (await api(q.url)).counts; renderTabs(); } catch { /* the next change retries */ }
    }, 300);
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
        // The row as the filters see it: the server answers the same
        // query narrowed to this id, so a row that no longer matches is
        // not returned.
        const {p, error} = runQuery();
        if (error) continue;
        const mine = p.get('prefix');
        if (mine && !id.startsWith(mine)) continue;
        p.set('prefix', id);
        p.set('limit', '1');
        const v = await api(`/v1/runs?${p}`);
        const r = v.runs[0];
        const known = rows.has(id);
        if (!r) {
          if (known) { rows.delete(id); order = order.filter((x) => x !== id); }
          continue;
        }
        if (r.flow && r.flow.id) flows.set(r.flow.id, r.flow.name || '');
        rows.set(r.run, r);
        if (!known) {
          // Newest first: ids are creation-ordered.
          order.push(r.run);
          order.sort((a, b) => (a < b ? 1 : a > b ? -1 : 0));
        }
      } catch { /* the next change retries */ }
    }
    render();
    recount();
  }
  const off = onState((d) => {
    if (d.resync) { load(true); return; }
    if (!d.run) return;
    pending.add(d.run);
    clearTimeout(timer);
    timer = setTimeout(refreshRows, 100);
  });

  load(true);
  return {dispose() { off(); clearTimeout(timer); clearTimeout(searchTimer); clearTimeout(countTimer); gen++; }};
}
