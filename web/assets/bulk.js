// What the pages that act on many runs share (issue 39): the run query's
// filters as the run list's search box writes them, a program picked from
// a file or pasted, and an NDJSON answer (`POST /v1/gate`, `POST
// /v1/recover`) read line by line as it streams, with a progress bar. The
// run list, the gate page and the recovery dialog use these, so a filter
// or a refusal reads the same on each.

import {api, lines} from './api.js';
import {fill, h, problemText} from './ui.js';

export const STATES = ['', 'running', 'paused', 'completed', 'faulted', 'halted'];

// The search box's words: `key:value` filters, `name=value` search
// attributes, anything else a run id prefix. A value may be quoted
// ("tool failed"). Returns the query parameters, or an error message.
function parseSearch(text) {
  const out = {attrs: {}};
  const words = text.match(/(?:[^\s"]+|"[^"]*")+/g) || [];
  const unquote = (v) => (v.length > 1 && v.startsWith('"') && v.endsWith('"') ? v.slice(1, -1) : v);
  const when = (v) => {
    if (/^\d+$/.test(v)) return v;
    const ms = Date.parse(v);
    return Number.isNaN(ms) ? null : String(ms);
  };
  for (const w of words) {
    const colon = /^([a-z]+):(.*)$/.exec(w);
    const eq = /^([A-Za-z0-9_.-]+)=(.*)$/.exec(w);
    if (colon) {
      const [, k, raw] = colon;
      const v = unquote(raw);
      const key = {entry: 'entry', fault: 'fault', fork: 'fork_of', nested: 'nested_in', flow: 'flow', state: 'state'}[k];
      if (key) { out[key] = v; continue; }
      if (k === 'since' || k === 'until') {
        const t = when(v);
        if (t === null) return {error: `${k}: needs a date (2026-12-06, 2026-12-06T10:00Z) or unix ms, not "${v}"`};
        out[k === 'since' ? 'started_from' : 'started_to'] = t;
        continue;
      }
      return {error: `unknown filter "${k}:": use entry:, fault:, fork:, nested:, flow:, state:, since:, until: or name=value`};
    }
    if (eq) {
      const raw = eq[2];
      let v = raw;
      if (/^(-?\d+|true|false)$/.test(raw)) v = JSON.parse(raw);
      else v = unquote(raw);
      out.attrs[eq[1]] = v;
      continue;
    }
    const id = unquote(w);
    out.prefix = id.startsWith('run-') ? id : `run-${id}`;
  }
  return out;
}

/**
 * The run query's filter parameters (`GET /v1/runs`'s, which the gate and
 * the recovery take too) for a search text, a state and a flow id (the
 * select's choice wins over the search box's `state:`/`flow:`). Returns
 * `{p}` (URLSearchParams), or `{error}` when the search cannot be read.
 */
export function filterParams({q = '', state = '', flow = ''}) {
  const s = parseSearch(q);
  if (s.error) return {error: s.error};
  const p = new URLSearchParams();
  for (const k of ['entry', 'fault', 'fork_of', 'nested_in', 'started_from', 'started_to', 'prefix']) if (s[k]) p.set(k, s[k]);
  if (Object.keys(s.attrs).length) p.set('attrs', JSON.stringify(s.attrs));
  if (flow || s.flow) p.set('flow', flow || s.flow);
  if (state || s.state) p.set('state', state || s.state);
  return {p};
}

/** A state select and a search box, as on the run list; `params()` is `filterParams` of them. */
export function filterForm(id) {
  const state = h('select', {id: `${id}-state`}, STATES.map((s) => h('option', {value: s}, s || 'any state')));
  const search = h('input', {
    id: `${id}-q`, type: 'search', placeholder: 'since:2026-12-01  until:2026-12-06  fault:timeout  customer=acme',
    autocomplete: 'off', spellcheck: 'false', 'aria-describedby': `${id}-q-hint`,
  });
  const el = h('fieldset', {class: 'filters'},
    h('legend', {}, 'Which runs'),
    h('label', {for: `${id}-state`}, 'State'), state,
    h('label', {for: `${id}-q`}, 'Search'), search,
    h('span', {id: `${id}-q-hint`, class: 'hint'}, 'as on the run list: since:, until: (a date or unix ms), entry:, fault:, fork:, nested:, a run id prefix, name=value'));
  return {el, params: () => filterParams({q: search.value.trim(), state: state.value})};
}

/**
 * A FlowSpec program from a file or pasted, and its root module's name
 * (taken from the file's name; the server binds Tools by it, and a
 * recovery's forks record it in their program hash). `value()` is
 * `{body: {flow, name}, doc}` — the text sent as written — or `{error}`.
 */
export function programField(id, label) {
  const file = h('input', {id: `${id}-file`, type: 'file', accept: '.json,application/json'});
  const text = h('textarea', {id: `${id}-text`, rows: 8, class: 'mono', spellcheck: 'false', placeholder: '{"spec_version": "1.0.0", "id": …}'});
  const name = h('input', {id: `${id}-name`, type: 'text', value: 'flow.json', spellcheck: 'false', 'aria-describedby': `${id}-name-hint`});
  file.addEventListener('change', async () => {
    const f = file.files[0];
    if (!f) return;
    text.value = await f.text();
    name.value = f.name;
  });
  const el = h('div', {class: 'program-field'},
    h('div', {class: 'field'}, h('label', {for: `${id}-file`}, `${label}: a FlowSpec file`), file),
    h('div', {class: 'field'}, h('label', {for: `${id}-text`}, 'or the document'), text),
    h('div', {class: 'field'}, h('label', {for: `${id}-name`}, 'Module name'), name,
      h('p', {class: 'hint', id: `${id}-name-hint`}, 'The root module\'s file name (e.g. triage.json): the server binds Tools by it.')));
  return {
    el,
    value() {
      if (!text.value.trim()) return {error: `${label}: choose a FlowSpec file or paste the document.`};
      let doc;
      try { doc = JSON.parse(text.value); } catch (e) { return {error: `${label} does not parse as JSON: ${e.message}`}; }
      return {doc, body: {flow: text.value, name: name.value.trim() || 'flow.json'}};
    },
  };
}

/** A progress bar that says "n of total" in words too (total may be unknown: null). */
export function progressBar(id, label) {
  const bar = h('progress', {id, max: 1, value: 0});
  const text = h('span', {class: 'progress-text', role: 'status', 'aria-live': 'polite'});
  const el = h('div', {class: 'progress', hidden: true}, h('label', {for: id}, label), ' ', bar, ' ', text);
  return {
    el,
    set(n, total) {
      el.hidden = false;
      if (total === null) {
        bar.removeAttribute('value');
        text.textContent = `${n} done`;
      } else {
        bar.max = Math.max(total, n, 1);
        bar.value = n;
        text.textContent = `${n} of ${Math.max(total, n)}`;
      }
    },
    hide() { el.hidden = true; },
  };
}

/** How many runs of `flow` the filters `p` select now (null when it cannot be known). */
export async function countRuns(flow, p) {
  if (!flow) return null;
  const q = new URLSearchParams(p);
  q.set('flow', flow);
  q.set('counts', 'true');
  q.set('limit', '1');
  try { return (await api(`/v1/runs?${q}`)).counts.total; } catch { return null; }
}

/**
 * Streams a gate or recovery: POSTs `body` to `path` and hands each
 * `{"run": …}` line to `onRun` as it comes, moving `bar` on. Resolves to
 * the `{"report": …}`; rejects with the server's refusal (an ApiError
 * with its problem, before any line) or with the `{"error": …}` line that
 * ended it.
 */
export async function streamRuns(path, body, {total, bar, onRun}) {
  let n = 0;
  let report = null;
  let failed = null;
  bar.set(0, total);
  await lines(path, {
    body,
    onLine(l) {
      if (l.run) {
        n += 1;
        bar.set(n, total);
        onRun(l.run, n);
      } else if (l.report) {
        report = l.report;
      } else if (l.error) {
        failed = l.error;
      }
    },
  });
  if (failed) throw new Error(failed);
  if (!report) throw new Error('the answer ended before its report: run it again (what was done is kept)');
  return report;
}

/** A refusal shown whole: the server's message and, when the program does not check, its diagnostics. */
export function refusal(err, what) {
  const diags = (err && err.problem && err.problem.diagnostics) || [];
  return h('div', {class: 'refusal', role: 'alert'},
    h('p', {class: 'form-err'}, `${what}: ${problemText(err)}`),
    diags.length ? h('ul', {class: 'diagnostics'}, diags.map((d) => h('li', {class: 'mono'}, diagnostic(d)))) : null);
}

function diagnostic(d) {
  if (typeof d === 'string') return d;
  const where = [d.code, d.path || d.pointer || d.node].filter(Boolean).join(' ');
  return `${where ? `${where}: ` : ''}${d.message || JSON.stringify(d)}`;
}
