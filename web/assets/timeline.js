// The fact timeline: a virtual list (only the rows in view are in the
// DOM, so a 10,000-fact history opens fast), keyboard-navigable as a
// listbox, following the end while the user is there. Each row: number,
// kind, what it is about, the outcome colour-coded, and the time since the
// previous fact as it arrived (the history itself records no clock).

import {duration, h} from './ui.js';

const ROW = 30;
const OVERSCAN = 12;

/** The outcome of a Reply (Ok, Failed, NotRun, Unknown, BadReply). */
export function outcomeOf(fact) {
  const o = fact && fact.outcome;
  if (!o || typeof o !== 'object') return null;
  return Object.keys(o)[0] || null;
}

function brief(v, max = 80) {
  let s;
  try { s = typeof v === 'string' ? v : JSON.stringify(v); } catch { s = String(v); }
  if (s === undefined) return '';
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}

/** One line about a fact. */
export function summary(kind, f) {
  switch (kind) {
    case 'Start':
      return `${f.entry ? `${f.entry.module}#${f.entry.function}` : ''} input ${brief(f.input, 60)}`;
    case 'Checkpoint':
      return `${f.node || ''} · ${f.task || ''} · ${f.delta ? 'delta' : 'snapshot'}`;
    case 'Call':
      return `${f.call} · ${f.tool} · node ${f.node || ''}`;
    case 'Reply': {
      const o = outcomeOf(f);
      return `${f.call} · ${o ? brief(f.outcome[o], 70) : ''}`;
    }
    case 'Close':
      return `${f.call} · ${brief(f.reason || f.why || f, 70)}`;
    case 'End': {
      const e = f.ending || {};
      if (e.Completed) return `completed · exit ${e.Completed.exit} · ${brief(e.Completed.output, 60)}`;
      if (e.Faulted) return `faulted · ${brief(e.Faulted, 70)}`;
      return brief(e);
    }
    default:
      return brief(f);
  }
}

export function timeline(container, {onSelect, label}) {
  const facts = []; // {n, kind, fact, at}
  let view = null; // indices into facts when filtered
  let selected = -1; // index into the shown list
  let marks = new Map(); // n → class
  let filterKind = '';
  const inner = h('div', {class: 'tl-inner'});
  const list = h('div', {
    class: 'tl', role: 'listbox', tabindex: 0, 'aria-label': label || 'Facts',
  }, inner);
  container.append(list);
  let follow = true;
  let frame = 0;

  const shown = () => (view ? view.length : facts.length);
  const at = (i) => facts[view ? view[i] : i];

  function schedule() {
    if (!frame) frame = requestAnimationFrame(render);
  }

  function render() {
    frame = 0;
    const total = shown();
    inner.style.height = `${total * ROW}px`;
    const top = list.scrollTop;
    const first = Math.max(0, Math.floor(top / ROW) - OVERSCAN);
    const last = Math.min(total, Math.ceil((top + list.clientHeight) / ROW) + OVERSCAN);
    const rows = [];
    for (let i = first; i < last; i++) rows.push(row(i));
    inner.replaceChildren(...rows);
    if (selected >= 0 && selected < total) list.setAttribute('aria-activedescendant', `fact-${at(selected).n}`);
  }

  function row(i) {
    const j = view ? view[i] : i;
    const r = facts[j];
    const o = r.kind === 'Reply' ? outcomeOf(r.fact) : null;
    const prev = facts[j - 1];
    const dt = r.at && prev && prev.at ? r.at - prev.at : null;
    const cls = ['tl-row', `kind-${r.kind}`];
    if (i === selected) cls.push('selected');
    const m = marks.get(r.n);
    if (m) cls.push(m);
    const el = h('div', {
      class: cls.join(' '), role: 'option', id: `fact-${r.n}`, 'aria-selected': i === selected ? 'true' : 'false',
      dataset: {n: r.n},
      onclick: () => choose(i),
    },
    h('span', {class: 'tl-n'}, r.n),
    h('span', {class: `tl-kind kind-${r.kind}`}, r.kind),
    h('span', {class: 'tl-sum'}, summary(r.kind, r.fact)),
    o ? h('span', {class: `outcome outcome-${o}`}, o) : h('span', {class: 'outcome-none'}),
    h('span', {class: 'tl-dt', title: 'time since the previous fact, as it arrived'}, dt === null ? '' : `+${duration(dt)}`));
    el.style.top = `${i * ROW}px`;
    return el;
  }

  function choose(i, focus = true) {
    if (i < 0 || i >= shown()) return;
    selected = i;
    follow = i === shown() - 1;
    ensureVisible(i);
    schedule();
    if (focus) list.focus({preventScroll: true});
    if (onSelect) onSelect(at(i));
  }

  function ensureVisible(i) {
    const y = i * ROW;
    if (y < list.scrollTop) list.scrollTop = y;
    else if (y + ROW > list.scrollTop + list.clientHeight) list.scrollTop = y + ROW - list.clientHeight;
  }

  list.addEventListener('scroll', () => {
    follow = list.scrollTop + list.clientHeight >= list.scrollHeight - ROW * 2;
    schedule();
  }, {passive: true});
  list.addEventListener('keydown', (e) => {
    const total = shown();
    const page = Math.max(1, Math.floor(list.clientHeight / ROW) - 1);
    const moves = {ArrowDown: 1, ArrowUp: -1, PageDown: page, PageUp: -page};
    if (e.key in moves) {
      e.preventDefault();
      choose(Math.min(total - 1, Math.max(0, (selected < 0 ? 0 : selected) + moves[e.key])));
    } else if (e.key === 'Home') {
      e.preventDefault();
      choose(0);
    } else if (e.key === 'End') {
      e.preventDefault();
      choose(total - 1);
    }
  });

  return {
    facts,
    /** Appends facts (in number order) and follows the end if the user is there. */
    add(batch, arrived) {
      for (const b of batch) facts.push({...b, at: arrived || null});
      if (view && filterKind) for (let i = facts.length - batch.length; i < facts.length; i++) if (facts[i].kind === filterKind) view.push(i);
      if (follow) {
        // Set after layout: the inner height grows in render().
        inner.style.height = `${shown() * ROW}px`;
        list.scrollTop = list.scrollHeight;
      }
      schedule();
    },
    /** Shows only facts of one kind (`''` for all). */
    filter(kind) {
      filterKind = kind;
      view = kind ? facts.map((f, i) => (f.kind === kind ? i : -1)).filter((i) => i >= 0) : null;
      selected = -1;
      schedule();
    },
    /** Selects and shows fact `n`. */
    show(n) {
      if (view) this.filter('');
      const i = facts.findIndex((f) => f.n === n);
      if (i >= 0) choose(i, false);
    },
    /** Marks facts by number with a class (e.g. the diverging one). */
    mark(map) {
      marks = map;
      schedule();
    },
    get length() { return facts.length; },
  };
}
