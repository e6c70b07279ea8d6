// Two runs side by side (issue 39 §4; `GET /v1/runs/{a}/diff/{b}`): a
// fork beside its parent, aligned from the checkpoint it was forked at,
// or any two runs fact by fact from Start. Where the histories part, and
// per call and per checkpoint each field that differs (a JSON path, A's
// value, B's value), then how each ended. The server aligns and compares;
// this page lays out what it said.

import {api} from './api.js';
import {fill, h, problemText, shortRun} from './ui.js';

export function mount(root, a, b) {
  const body = h('div', {class: 'diff-page', 'aria-live': 'polite'}, h('p', {class: 'status'}, 'Comparing…'));
  fill(root,
    h('div', {class: 'page-head'}, h('h1', {}, 'Run diff'),
      h('a', {class: 'btn-quiet', href: `#/diff/${b}/${a}`}, 'Swap A and B')),
    body);
  let gone = false;
  api(`/v1/runs/${encodeURIComponent(a)}/diff/${encodeURIComponent(b)}`).then((d) => {
    if (!gone) fill(body, view(d));
  }, (e) => {
    if (!gone) fill(body, h('p', {class: 'form-err', role: 'alert'}, problemText(e)));
  });
  return {dispose() { gone = true; }};
}

const link = (id) => h('a', {href: `#/run/${id}`, class: 'mono', title: id}, shortRun(id));

function view(d) {
  const al = d.alignment;
  const aligned = al.kind === 'fork'
    ? ['B is a fork of A from A\'s checkpoint at fact ', String(al.checkpoint), ': aligned from there (B\'s fact 2).']
    : al.kind === 'parent'
      ? ['A is a fork of B from B\'s checkpoint at fact ', String(al.checkpoint), ': aligned from there (A\'s fact 2).']
      : ['Aligned fact by fact from Start.'];
  const pair = (p) => `A fact ${p.a ?? '— (ended)'} / B fact ${p.b ?? '— (ended)'}`;
  return [
    h('div', {class: 'diff-sides'},
      h('p', {class: 'side side-a'}, h('strong', {}, 'A '), link(d.a), h('span', {class: 'sub'}, `${d.facts.a} facts`)),
      h('p', {class: 'side side-b'}, h('strong', {}, 'B '), link(d.b), h('span', {class: 'sub'}, `${d.facts.b} facts`))),
    h('p', {class: 'alignment'}, aligned),
    d.same
      ? h('p', {class: 'verdict-matched diff-verdict'}, h('strong', {}, 'The same'), ': the two histories agree fact for fact from the alignment on.')
      : h('p', {class: 'verdict-diverged diff-verdict'},
        d.shared ? `Shared through ${pair(d.shared)}; ` : 'They differ from the first aligned facts; ',
        h('strong', {}, `parted at ${pair(d.parted)}`), '.'),
    d.input.length ? section('Input', 'The Starts\' inputs', fieldsTable(d.input, 'input')) : null,
    d.calls.length
      ? section('Calls that differ', 'Paired in the order each run made them from the alignment on.', d.calls.map(callDiff))
      : h('p', {class: 'hint'}, 'No call differs.'),
    d.checkpoints.length
      ? section('Checkpoints that differ', 'Paired in the order each run took them from the alignment on.', d.checkpoints.map(checkpointDiff))
      : h('p', {class: 'hint'}, 'No checkpoint differs.'),
    section('Endings', null, h('div', {class: 'diff-sides'}, ending('A', d.endingA), ending('B', d.endingB))),
  ];
}

function section(title, hint, ...content) {
  return h('section', {class: 'panel diff-section'}, h('h2', {}, title), hint ? h('p', {class: 'hint'}, hint) : null, content);
}

function callDiff(c) {
  const side = (name, s) => h('div', {class: `side side-${name.toLowerCase()}`},
    h('h4', {}, name),
    s ? h('p', {class: 'mono small'}, `${s.call} · ${s.tool} at ${s.node} · Call fact ${s.fact}${s.reply ? ` · Reply fact ${s.reply}` : ' · no Reply'}`)
      : h('p', {class: 'sub'}, 'no such call: this run made fewer'));
  return h('article', {class: 'call-diff', dataset: {index: c.index}},
    h('h3', {}, `Call ${c.index}`, c.a || c.b ? h('span', {class: 'sub mono'}, (c.a || c.b).call) : null),
    h('div', {class: 'diff-sides'}, side('A', c.a), side('B', c.b)),
    fieldsTable(c.fields, `call ${c.index}`));
}

function checkpointDiff(c) {
  const at = (f, node) => (f ? `fact ${f}${node ? ` (node ${node})` : ''}` : '— (ended)');
  return h('article', {class: 'checkpoint-diff', dataset: {index: c.index}},
    h('h3', {}, `Checkpoint ${c.index}`, h('span', {class: 'sub'}, `A ${at(c.facts.a, c.nodeA)} · B ${at(c.facts.b, c.nodeB)}`)),
    fieldsTable(c.fields, `checkpoint ${c.index}`));
}

/** Each differing field: its path, A's value and B's, side by side. */
function fieldsTable(fields, what) {
  return h('div', {class: 'table-wrap'}, h('table', {class: 'diff fields'},
    h('caption', {class: 'sr-only'}, `What differs in ${what}`),
    h('thead', {}, h('tr', {}, ['Path', 'A', 'B'].map((t) => h('th', {scope: 'col'}, t)))),
    h('tbody', {}, fields.map((f) => h('tr', {dataset: {path: f.path}},
      h('td', {class: 'mono'}, f.path),
      h('td', {class: 'mono value-a'}, value(f.a)),
      h('td', {class: 'mono value-b'}, value(f.b)))))));
}

function value(v) {
  if (v === undefined || v === null) return h('span', {class: 'sub'}, 'absent');
  const text = JSON.stringify(v);
  return text.length > 400 ? h('span', {title: text}, `${text.slice(0, 399)}…`) : text;
}

function ending(name, e) {
  return h('div', {class: `side side-${name.toLowerCase()}`}, h('h4', {}, name),
    e
      ? h('p', {}, h('span', {class: `badge state-${e.ending}`}, e.ending), ` at fact ${e.fact}`,
        e.exit ? ` · exit ${e.exit}` : '', e.fault ? h('span', {class: 'mono'}, ` · ${e.fault}`) : '')
      : h('p', {class: 'sub'}, 'not ended'));
}
