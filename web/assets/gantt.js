// Where a run's time went (issue 38 §3): a Gantt of its calls from
// GET /v1/runs/{run}/timeline. One row per task, so a parallel branch's
// calls sit side by side on rows of their own; each call a bar from when
// it was sent to when its Reply was admitted (a call still out runs to
// now). Calls with no recorded times (a run from before timings, an
// imported archive) are listed without a bar: no duration is guessed.

import {duration, fill, h} from './ui.js';

/** Draws timeline `t` into `container`; `onSelect(call)` on a bar's click. */
export function gantt(container, t, onSelect) {
  const calls = t.calls || [];
  if (!calls.length) {
    fill(container, h('p', {class: 'hint'}, 'No calls yet.'));
    return;
  }
  const timed = calls.filter((c) => c.sentMs != null);
  const now = Date.now();
  const end = (c) => c.repliedMs ?? (c.outcome ? c.sentMs : now);
  const t0 = Math.min(...timed.map((c) => c.sentMs), t.startedMs ?? Infinity);
  const t1 = Math.max(...timed.map(end), t.endedMs ?? -Infinity, t0 + 1);
  const span = t1 - t0;
  const rows = new Map(); // task → calls, in history order
  for (const c of calls) {
    if (!rows.has(c.task)) rows.set(c.task, []);
    rows.get(c.task).push(c);
  }
  const total = t.durationMs != null ? `took ${duration(t.durationMs)}` : '';
  const said = total || (timed.length ? `${duration(span)} from the first call to the last reply` : '');
  const head = h('p', {class: 'gantt-sum'}, said ? `${said}.` : '',
    timed.length < calls.length ? ` ${calls.length - timed.length} of ${calls.length} calls have no recorded times.` : '');
  const body = [...rows].map(([task, cs]) => h('div', {class: 'gantt-row', role: 'listitem', 'data-task': task},
    h('span', {class: 'gantt-task mono', title: task}, task),
    h('div', {class: 'gantt-track'}, cs.map((c) => bar(c)))));
  function bar(c) {
    const label = `${c.node}: ${c.tool}`;
    const took = c.durationMs != null ? duration(c.durationMs) : (c.sentMs != null && !c.outcome ? 'out' : '');
    const text = `${c.call} at node ${c.node} to ${c.tool}${c.route ? ` (${c.route}${c.worker ? ` ${c.worker}` : ''})` : ''}: ${c.outcome || 'open'}${took ? `, ${took}` : ''}`;
    const attrs = {
      type: 'button', class: `gantt-bar outcome-${(c.outcome || 'open').toLowerCase()}`,
      'data-call': c.call, 'data-node': c.node, title: text, 'aria-label': text,
      onclick: () => onSelect && onSelect(c),
    };
    if (c.sentMs == null) {
      return h('button', {...attrs, class: `${attrs.class} untimed`}, `${label} —`);
    }
    const left = ((c.sentMs - t0) / span) * 100;
    const width = Math.max(((end(c) - c.sentMs) / span) * 100, 0.5);
    if (c.durationMs != null) attrs['data-ms'] = String(c.durationMs);
    const el = h('button', attrs, h('span', {class: 'gantt-label'}, `${label}${took ? ` · ${took}` : ''}`));
    // Through the CSSOM: the page's CSP refuses style attributes.
    el.style.left = `${left.toFixed(2)}%`;
    el.style.width = `${width.toFixed(2)}%`;
    return el;
  }
  fill(container, head, h('div', {class: 'gantt', role: 'list', 'aria-label': 'Calls over time, one row per task'}, body));
}

/**
 * The fault view's call (issue 38 §4): the node, the call, its Tool, what it
 * answered and why, and the end of its Tool process's stderr.
 */
export function faultCall(c) {
  if (!c) return null;
  return h('div', {class: 'fault-call'},
    h('p', {}, 'node ', h('code', {}, c.node), ', call ', h('code', {}, c.call), ' to ', h('code', {}, c.tool),
      ', answered ', h('code', {}, c.outcome || 'nothing'), c.reason ? [': ', h('span', {class: 'fault-reason'}, c.reason)] : null),
    c.stderr ? [h('p', {class: 'sub'}, 'The end of its stderr:'), h('pre', {class: 'stderr small'}, c.stderr)] : null);
}
