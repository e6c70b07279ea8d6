// The replay gate (issue 39 §1; `POST /v1/gate`): a candidate FlowSpec,
// the run query's filters, then every stored run of the candidate's flow
// id replayed against it on the server with nothing bound, read as the
// NDJSON progress streams (a bar: n of the runs selected), then the
// verdict grouped by reason with one example run each. A candidate that
// does not check is refused before any run is read: its diagnostics are
// shown. Before deploying a changed flow, this answers "will my stored
// runs still replay under it?".

import {countRuns, filterForm, progressBar, programField, refusal, streamRuns} from './bulk.js';
import {fill, h, shortRun} from './ui.js';

export function mount(root) {
  const program = programField('gate', 'Candidate');
  const filters = filterForm('gate-f');
  const bar = progressBar('gate-progress', 'Runs replayed');
  const tally = h('p', {class: 'tally', 'aria-live': 'polite'});
  const result = h('div', {class: 'gate-result'});
  const go = h('button', {type: 'submit', class: 'btn'}, 'Run gate');
  let running = false;

  fill(root,
    h('div', {class: 'page-head'}, h('h1', {}, 'Replay gate')),
    h('p', {class: 'lede'}, 'Before deploying a changed flow: every stored run of its flow id (the document\'s "id") that the filters select is replayed against the candidate on the server, nothing bound and nothing started. A run that diverges would not resume under it.'),
    h('form', {class: 'card gate-form', novalidate: true, 'aria-label': 'Replay gate', onsubmit: run},
      program.el, filters.el,
      h('div', {class: 'actions'}, go)),
    bar.el, tally, result);

  async function run(e) {
    e.preventDefault();
    if (running) return;
    const prog = program.value();
    const sel = filters.params();
    if (prog.error || sel.error) {
      fill(result, h('p', {class: 'form-err', role: 'alert'}, prog.error || sel.error));
      return;
    }
    running = true;
    go.disabled = true;
    fill(result);
    const counts = {matched: 0, incomplete: 0, diverged: 0};
    const showTally = () => { tally.textContent = `so far: ${counts.matched} matched, ${counts.incomplete} incomplete, ${counts.diverged} diverged`; };
    showTally();
    try {
      // The bar's total: what the same filters select of the flow now.
      const total = await countRuns(prog.doc && prog.doc.id, sel.p);
      const report = await streamRuns(`/v1/gate?${sel.p}`, prog.body, {
        total, bar, onRun(r) { counts[r.verdict] += 1; showTally(); },
      });
      tally.textContent = '';
      fill(result, verdict(report));
    } catch (err) {
      bar.hide();
      tally.textContent = '';
      fill(result, refusal(err, 'The gate was refused'));
    } finally {
      running = false;
      go.disabled = false;
    }
  }
}

/** The report: passed or not, the counts, the groups with an example each. */
function verdict(r) {
  const head = r.passed
    ? h('p', {class: 'verdict-matched gate-verdict'}, h('strong', {}, 'Gate passed'), `: no stored run of ${r.flow} diverges under the candidate.`)
    : h('p', {class: 'verdict-diverged gate-verdict'}, h('strong', {}, 'Gate failed'), `: ${r.diverged} of ${r.runs} stored runs of ${r.flow} diverge under the candidate.`);
  return [
    head,
    h('dl', {class: 'gate-counts meta-grid'},
      h('dt', {}, 'Runs replayed'), h('dd', {dataset: {count: 'runs'}}, String(r.runs)),
      h('dt', {}, 'Matched'), h('dd', {dataset: {count: 'matched'}}, String(r.matched)),
      h('dt', {}, 'Incomplete'), h('dd', {dataset: {count: 'incomplete'}}, String(r.incomplete)),
      h('dt', {}, 'Diverged'), h('dd', {dataset: {count: 'diverged'}}, String(r.diverged)),
      h('dt', {}, 'Facts read'), h('dd', {}, String(r.facts))),
    r.incomplete ? h('p', {class: 'hint'}, 'Incomplete runs pass: every fact they recorded re-derives under the candidate; they have not ended yet.') : null,
    r.groups.length
      ? h('div', {class: 'table-wrap'}, h('table', {class: 'gate-groups'},
        h('caption', {}, 'Runs by verdict and reason, diverged first'),
        h('thead', {}, h('tr', {}, ['Verdict', 'Reason', 'Runs', 'Example'].map((c) => h('th', {scope: 'col'}, c)))),
        h('tbody', {}, r.groups.map((g) => h('tr', {class: `group-${g.verdict}`},
          h('td', {}, h('span', {class: `badge verdict-badge-${g.verdict}`}, g.verdict)),
          h('td', {}, g.verdict === 'diverged' ? `at fact ${g.fact}: ${g.reason || ''}` : (g.reason || '—')),
          h('td', {class: 'num'}, String(g.runs)),
          h('td', {}, h('a', {href: `#/run/${g.example}`, class: 'mono', title: g.example}, shortRun(g.example))))))))
      : h('p', {}, 'No run of this flow matches the filters.'),
  ];
}
