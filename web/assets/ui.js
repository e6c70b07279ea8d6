// Small DOM and formatting helpers shared by every view. No framework:
// `h` builds elements, the views replace what they own.

/** Builds an element: h('a', {href: '#/', class: 'x'}, 'text', child). */
export function h(tag, attrs, ...children) {
  const svg = tag.startsWith('svg:');
  const el = svg
    ? document.createElementNS('http://www.w3.org/2000/svg', tag.slice(4))
    : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') {
      el.addEventListener(k.slice(2), v);
    } else if (k === 'dataset') {
      Object.assign(el.dataset, v);
    } else if (k === 'text') {
      el.textContent = v;
    } else {
      el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** Replaces the children of `el`. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** `blake3:abcdef…` → `abcdef12` for display. */
export function shortHash(h) {
  if (!h) return '';
  const i = h.indexOf(':');
  return h.slice(i + 1, i + 9);
}

/** `run-01m8rjd5…` shortened, keeping the end (where ids differ most). */
export function shortRun(id) {
  return id && id.length > 16 ? `${id.slice(0, 8)}…${id.slice(-8)}` : id || '';
}

export function time(ms) {
  if (!ms) return '';
  const d = new Date(ms);
  return d.toLocaleString(undefined, {
    year: 'numeric', month: 'short', day: '2-digit',
    hour: '2-digit', minute: '2-digit', second: '2-digit',
  });
}

/** A duration in ms as `1.2 s`, `3 min 4 s`, `2 h 5 min`. */
export function duration(ms) {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return '';
  const neg = ms < 0;
  let s = Math.abs(ms);
  let out;
  if (s < 1000) out = `${Math.round(s)} ms`;
  else if (s < 60_000) out = `${(s / 1000).toFixed(s < 10_000 ? 1 : 0)} s`;
  else if (s < 3_600_000) out = `${Math.floor(s / 60_000)} min ${Math.floor((s % 60_000) / 1000)} s`;
  else if (s < 86_400_000) out = `${Math.floor(s / 3_600_000)} h ${Math.floor((s % 3_600_000) / 60_000)} min`;
  else out = `${Math.floor(s / 86_400_000)} d ${Math.floor((s % 86_400_000) / 3_600_000)} h`;
  return neg ? `-${out}` : out;
}

/** A countdown: `23 h 59 min 12 s` (seconds shown below a day). */
export function countdown(ms) {
  if (ms <= 0) return 'deadline passed';
  const d = Math.floor(ms / 86_400_000);
  const hh = Math.floor((ms % 86_400_000) / 3_600_000);
  const mm = Math.floor((ms % 3_600_000) / 60_000);
  const ss = Math.floor((ms % 60_000) / 1000);
  if (d > 0) return `${d} d ${hh} h ${mm} min`;
  return `${hh} h ${mm} min ${ss} s`;
}

/** A badge for a run state (text always says the state: colour is extra). */
export function stateBadge(state) {
  return h('span', {class: `badge state-${state || 'unknown'}`}, state || 'unknown');
}

/** Pretty JSON text. */
export function pretty(v) {
  return JSON.stringify(v, null, 2);
}

/** Canonical-enough text for comparing values (sorted keys). */
export function stable(v) {
  if (Array.isArray(v)) return `[${v.map(stable).join(',')}]`;
  if (v && typeof v === 'object') {
    return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${stable(v[k])}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

let toastTimer = 0;
/** A short message in the live region. */
export function toast(msg, kind = 'info') {
  const t = document.getElementById('toast');
  if (!t) return;
  t.className = `toast toast-${kind}`;
  t.textContent = msg;
  t.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { t.hidden = true; }, 6000);
}

/** The message to show for a failed request. */
export function problemText(e) {
  if (e && e.problem) return `${e.problem.title || 'Error'} (${e.status}): ${e.problem.detail || ''}`;
  return String((e && e.message) || e);
}

/** A labelled select. */
export function select(label, id, options, value, onchange) {
  return h('label', {class: 'field-inline', for: id}, label, ' ',
    h('select', {id, onchange},
      options.map(([v, text]) => h('option', {value: v, selected: v === value}, text))));
}

/** Triggers a download of `blob` as `name`. */
export function download(blob, name) {
  const url = URL.createObjectURL(blob);
  const a = h('a', {href: url, download: name, hidden: true});
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/** Run state changes from the one `/v1/events` stream (app.js feeds it). */
const stateListeners = new Set();
export function onState(f) {
  stateListeners.add(f);
  return () => stateListeners.delete(f);
}
export function emitState(d) {
  for (const f of [...stateListeners]) f(d);
}
