// Bulk recovery from the run list (issue 39 §2; `POST /v1/recover` with
// `runs`: the ids chosen there): a FIXED program pasted or uploaded, a
// dry run first — per run what would be forked from which checkpoint,
// which recorded calls the fork makes again, which runs cannot be
// recovered and why — then the recovery itself with its progress, each
// fork linked. The server decides everything (the fork point, whether a
// run is already recovered); this dialog shows what it said.

import {programField, progressBar, refusal, streamRuns} from './bulk.js';
import {fill, h, shortRun} from './ui.js';

const WORDS = {
  recovered: 'recovered',
  recoverable: 'recoverable',
  notNeeded: 'not needed',
  alreadyRecovered: 'already recovered',
  unrecoverable: 'cannot be recovered',
};

/** Opens the recovery dialog for `runs` (ids); `onClose` when it closes. */
export function openRecover(runs, {onClose = () => {}} = {}) {
  const program = programField('recover', 'Fixed program');
  const bar = progressBar('recover-progress', 'Runs done');
  const status = h('p', {class: 'status', role: 'status', 'aria-live': 'polite'});
  const tbody = h('tbody');
  const table = h('div', {class: 'table-wrap', hidden: true}, h('table', {class: 'recover-runs'},
    h('caption', {class: 'sr-only'}, 'What the recovery does with each run'),
    h('thead', {}, h('tr', {}, ['Run', 'Outcome', 'Fork point', 'Calls made again', 'Diverges / why'].map((c) => h('th', {scope: 'col'}, c)))),
    tbody));
  const result = h('div', {class: 'recover-result'});
  const dry = h('button', {type: 'button', class: 'btn', onclick: () => go(true)}, 'Dry run');
  const real = h('button', {type: 'button', class: 'btn btn-danger', hidden: true, onclick: () => go(false)}, 'Recover');
  const close = h('button', {type: 'button', class: 'btn-quiet', onclick: () => dialog.close()}, 'Close');
  const dialog = h('dialog', {class: 'recover-dialog', 'aria-labelledby': 'recover-title'},
    h('h2', {id: 'recover-title'}, `Recover ${runs.length} run${runs.length === 1 ? '' : 's'}`),
    h('p', {class: 'hint'}, 'Each run that the fixed program no longer replays is forked onto it from the latest checkpoint before where it diverges that the program fits, and the fork is started. Every recorded reply before that checkpoint is kept: no call before it is made again. The dry run forks nothing.'),
    program.el,
    h('div', {class: 'actions'}, dry, real, close),
    bar.el, status, table, result);
  // The program the dry run was made with: Recover sends exactly that.
  let planned = null;
  let busy = false;
  dialog.addEventListener('input', () => changed());
  dialog.addEventListener('change', (e) => { if (e.target.type === 'file') changed(); });
  function changed() {
    if (!planned || busy) return;
    planned = null;
    real.hidden = true;
    status.textContent = 'The program changed: run the dry run again.';
  }

  async function go(dryRun) {
    if (busy) return;
    const prog = dryRun ? program.value() : {body: planned};
    if (prog.error) { fill(result, h('p', {class: 'form-err', role: 'alert'}, prog.error)); return; }
    busy = true;
    dry.disabled = true;
    real.disabled = true;
    fill(result);
    fill(tbody);
    table.hidden = false;
    status.textContent = dryRun ? 'Dry run: nothing is forked…' : 'Recovering…';
    try {
      const report = await streamRuns('/v1/recover', {...prog.body, dryRun, runs}, {
        total: runs.length, bar, onRun(r) { tbody.append(row(r)); },
      });
      fill(result, summary(report));
      status.textContent = '';
      planned = dryRun ? prog.body : null;
      real.hidden = !(dryRun && report.recoverable > 0);
      real.textContent = `Recover ${report.recoverable} run${report.recoverable === 1 ? '' : 's'}`;
    } catch (err) {
      bar.hide();
      status.textContent = '';
      fill(result, refusal(err, dryRun ? 'The dry run was refused' : 'The recovery was refused'));
    } finally {
      busy = false;
      dry.disabled = false;
      real.disabled = false;
    }
  }

  dialog.addEventListener('close', () => { dialog.remove(); onClose(); });
  document.body.append(dialog);
  dialog.showModal();
}

const runLink = (id) => h('a', {href: `#/run/${id}`, class: 'mono', title: id}, shortRun(id));

/** One run's line: what was (or would be) done, from where, and why. */
function row(r) {
  const from = r.checkpoint ? [`checkpoint ${r.checkpoint}`, r.node ? h('span', {class: 'sub'}, `node ${r.node}`) : null] : '—';
  const again = r.outcome === 'recoverable' || r.outcome === 'recovered'
    ? (r.again && r.again.length
      ? h('ul', {class: 'again'}, r.again.map((c) => h('li', {class: 'mono'}, `${c.call} ${c.tool} at ${c.node} (fact ${c.fact})`)))
      : 'none')
    : '—';
  const why = [];
  if (r.fork) why.push(r.outcome === 'recovered' ? 'fork ' : 'its fork ', h('a', {href: `#/run/${r.fork}`, class: 'mono fork-link', title: r.fork}, shortRun(r.fork)), ' ');
  if (r.diverged) why.push(`diverges at fact ${r.diverged}: ${r.reason || ''}`);
  if (r.why) why.push(r.why);
  if (r.outcome === 'notNeeded') why.push('the fixed program replays it: nothing to recover');
  return h('tr', {class: `outcome-${r.outcome}`, dataset: {run: r.run}},
    h('td', {}, runLink(r.run)),
    h('td', {}, h('span', {class: `badge recover-${r.outcome}`}, WORDS[r.outcome] || r.outcome)),
    h('td', {}, from),
    h('td', {}, again),
    h('td', {}, why.length ? why : '—'));
}

function summary(r) {
  const counts = r.dryRun
    ? `${r.recoverable} recoverable, ${r.notNeeded} not needed, ${r.alreadyRecovered} already recovered, ${r.unrecoverable} cannot be recovered`
    : `${r.recovered} recovered, ${r.notNeeded} not needed, ${r.alreadyRecovered} already recovered, ${r.unrecoverable} cannot be recovered`;
  return h('p', {class: r.unrecoverable ? 'form-err recover-summary' : 'ok recover-summary'},
    r.dryRun ? `Dry run over ${r.runs} runs: ${counts}. Nothing was forked.` : `${r.runs} runs: ${counts}; the forks are started (${(r.elapsedMs / 1000).toFixed(1)} s). Recorded as recovery ${r.recovery}.`);
}
