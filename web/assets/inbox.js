// The inbox: every open call waiting on a person across all runs
// (`GET /v1/calls`), each with its prompt, a form generated from its
// `resume_schema`, and its deadline as a countdown. A reply is checked in
// the page, then by the server; a refusal is shown at the field it names.

import {api} from './api.js';
import {schemaForm} from './form.js';
import {authorOrder} from './order.js';
import {countdown, fill, h, onState, problemText, shortRun, time, toast} from './ui.js';

/** A card for one open call; `onDone` after the server took the reply. */
export function callCard(c, {onDone, showRun = true} = {}) {
  const form = schemaForm(c.schema || {}, {label: 'Reply', idPrefix: `c-${c.run.slice(-6)}-${c.call.replace(/[^A-Za-z0-9]/g, '')}`});
  const status = h('p', {class: 'status', role: 'status', 'aria-live': 'polite'});
  const due = h('p', {class: 'due'});
  const tick = () => {
    if (!c.dueMs) {
      due.textContent = 'No deadline';
      return;
    }
    const left = c.dueMs - Date.now();
    due.textContent = left > 0 ? `Deadline in ${countdown(left)} (${time(c.dueMs)})` : `Deadline passed (${time(c.dueMs)})`;
    due.classList.toggle('due-soon', left < 3_600_000);
  };
  tick();
  const timer = setInterval(tick, 1000);
  const send = h('button', {type: 'submit', class: 'btn'}, 'Send reply');
  const headingId = `h-${c.run}-${c.call}`.replace(/[^A-Za-z0-9_-]/g, '_');
  const card = h('article', {class: 'card call', 'aria-labelledby': headingId, dataset: {run: c.run, call: c.call}},
    h('h2', {id: headingId},
      `${c.node || 'call'} `, h('span', {class: 'sub mono'}, c.call)),
    h('p', {class: 'meta'},
      showRun ? h('a', {href: `#/run/${c.run}`, class: 'mono', title: c.run}, shortRun(c.run)) : null,
      showRun ? ' · ' : null, h('span', {class: 'mono'}, c.tool || ''),
      c.sinceMs ? ` · waiting since ${time(c.sinceMs)}` : ''),
    due,
    c.prompt ? h('pre', {class: 'prompt'}, c.prompt) : null,
    h('form', {
      class: 'reply', novalidate: true, 'aria-label': `Reply to ${c.call}`,
      async onsubmit(e) {
        e.preventDefault();
        const r = form.submit();
        if (!r.ok) {
          status.textContent = 'Fix the marked fields.';
          return;
        }
        send.disabled = true;
        card.classList.add('sending');
        status.textContent = 'Sending…';
        try {
          const v = await api(`/v1/runs/${c.run}/resume`, {method: 'POST', body: {call: c.call, reply: {Ok: r.value}}});
          status.textContent = `Sent: the run is ${v.state}.`;
          card.classList.add('answered');
          card.classList.remove('sending');
          clearInterval(timer);
          due.textContent = 'Answered';
          toast(`Reply to ${c.call} sent`);
          if (onDone) onDone(v);
        } catch (err) {
          send.disabled = false;
          card.classList.remove('sending');
          if (err.status === 422) {
            form.serverError(err.problem.detail);
            status.textContent = 'The server refused the reply; see the marked field.';
          } else {
            status.textContent = problemText(err);
          }
        }
      },
    }, form.el, h('div', {class: 'actions'}, send), status));
  card.dispose = () => clearInterval(timer);
  card.setDue = (ms) => { c.dueMs = ms; tick(); };
  return card;
}

export function mount(root) {
  const list = h('div', {class: 'cards'});
  const status = h('p', {class: 'status', role: 'status', 'aria-live': 'polite'});
  // The inbox pages by the server's cursor: the first page, then "Show
  // more" for the next; a refresh reloads as many pages as are shown.
  const more = h('button', {type: 'button', class: 'btn secondary', hidden: true, onclick: () => { pages++; load(); }}, 'Show more');
  let cards = new Map(); // run+call → card
  let pages = 1;
  fill(root, h('div', {class: 'page-head'}, h('h1', {}, 'Inbox')),
    h('p', {class: 'lede'}, 'Calls waiting on a person, across all runs, longest waiting first.'), status, list,
    h('div', {class: 'actions'}, more));
  let gen = 0;
  async function fetchPages() {
    const calls = [];
    let after = '';
    let v;
    for (let i = 0; i < pages; i++) {
      v = await api(`/v1/calls?state=open&limit=${PAGE}${after}`);
      calls.push(...v.calls);
      if (!v.next) break;
      after = `&after=${encodeURIComponent(v.next)}`;
    }
    return {calls, total: v.total, next: v.next};
  }
  async function load() {
    const my = ++gen;
    try {
      const v = await fetchPages();
      if (my !== gen) return;
      const keyOf = (c) => `${c.run} ${c.call}`;
      // A new card's form lists the fields as the flow's author wrote them.
      const fresh = v.calls.filter((c) => !cards.has(keyOf(c)));
      const schemas = new Map(await Promise.all(fresh.map(async (c) => [keyOf(c), await authorOrder(c)])));
      if (my !== gen) return;
      const next = new Map();
      for (const c of v.calls) {
        const key = keyOf(c);
        // Keep a card being filled in; add new ones.
        next.set(key, cards.get(key) || callCard({...c, schema: schemas.get(key)}, {onDone: () => setTimeout(load, 300)}));
      }
      // A card whose reply is on its way or was taken stays, saying so.
      const kept = (card) => card.classList.contains('answered') || card.classList.contains('sending');
      for (const [k, card] of cards) if (!next.has(k) && !kept(card)) card.dispose();
      const answered = [...cards].filter(([k, card]) => !next.has(k) && kept(card));
      for (const [k, c] of answered) next.set(k, c);
      cards = next;
      fill(list, [...cards.values()]);
      const shown = v.calls.length;
      more.hidden = !v.next;
      status.textContent = v.total
        ? `${v.total} call${v.total === 1 ? '' : 's'} waiting${shown < v.total ? ` (${shown} shown)` : ''}`
        : 'Nothing is waiting on a person.';
    } catch (e) {
      status.textContent = problemText(e);
    }
  }
  let timer = 0;
  const off = onState(() => {
    clearTimeout(timer);
    timer = setTimeout(load, 200);
  });
  load();
  return {dispose() { off(); clearTimeout(timer); gen++; for (const c of cards.values()) c.dispose(); }};
}

/** Calls per inbox page. */
const PAGE = 50;
