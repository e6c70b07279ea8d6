// A run's state at a checkpoint (`GET /v1/runs/{run}/checkpoints/{fact}`),
// the difference between two checkpoints (what the steps between them
// changed), and a fork from a checkpoint with edited fields: a form
// generated from `state_schema`, filled with the checkpoint's state; only
// the fields that changed are sent as `set`.

import {api} from './api.js';
import {schemaForm} from './form.js';
import {fill, h, pretty, problemText, stable} from './ui.js';

/** Flattens a value into path → leaf JSON text (objects descend). */
function leaves(v, path = '$', out = new Map()) {
  if (v && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length) {
    for (const k of Object.keys(v).sort()) leaves(v[k], `${path}.${k}`, out);
  } else {
    out.set(path, stable(v));
  }
  return out;
}

/** [{path, change: added|removed|changed, before, after}] from a to b. */
export function diff(a, b) {
  const x = leaves(a);
  const y = leaves(b);
  const out = [];
  for (const [p, v] of x) {
    if (!y.has(p)) out.push({path: p, change: 'removed', before: v, after: ''});
    else if (y.get(p) !== v) out.push({path: p, change: 'changed', before: v, after: y.get(p)});
  }
  for (const [p, v] of y) if (!x.has(p)) out.push({path: p, change: 'added', before: '', after: v});
  return out.sort((m, n) => (m.path < n.path ? -1 : 1));
}

function short(t) {
  return t.length > 160 ? `${t.slice(0, 159)}…` : t;
}

/**
 * The checkpoint panel. `checkpoints()` lists the root task's checkpoint
 * facts [{n, node}] seen so far; `setFlow` gives it the FlowSpec document.
 */
export function checkpointPanel(runId, {checkpoints}) {
  let flow = null;
  const title = h('h2', {id: 'cp-title', tabindex: -1}, 'State at a checkpoint');
  const body = h('div', {class: 'cp-body'});
  const el = h('section', {class: 'panel checkpoint', 'aria-labelledby': 'cp-title'}, title,
    h('p', {class: 'hint'}, 'Choose a Checkpoint in the timeline (or its "State" button) to see the whole state there, compare it with another, or fork from it.'),
    body);
  let gen = 0;

  async function show(n, {fork = false, compare = null} = {}) {
    const my = ++gen;
    fill(body, h('p', {}, `Loading checkpoint ${n}…`));
    try {
      const cp = await api(`/v1/runs/${runId}/checkpoints/${n}`);
      if (my !== gen) return;
      const list = checkpoints().filter((c) => c.n !== n);
      const prev = [...list].reverse().find((c) => c.n < n);
      const cmpSel = h('select', {id: 'cp-compare'},
        h('option', {value: ''}, '— none —'),
        list.map((c) => h('option', {value: c.n, selected: c.n === (compare || (prev && prev.n))}, `fact ${c.n} · ${c.node}`)));
      const diffBox = h('div', {class: 'diff-box', 'aria-live': 'polite'});
      const forkBox = h('div', {class: 'fork-box'});
      const compareTo = async () => {
        const m = Number(cmpSel.value);
        if (!m) { fill(diffBox); return; }
        try {
          const other = await api(`/v1/runs/${runId}/checkpoints/${m}`);
          const [a, b, an, bn] = m < n ? [other.state, cp.state, m, n] : [cp.state, other.state, n, m];
          const d = diff(a, b);
          fill(diffBox,
            h('h3', {}, `What changed from fact ${an} to fact ${bn}`),
            d.length
              ? h('table', {class: 'diff'},
                h('thead', {}, h('tr', {}, ['Path', 'Change', `At ${an}`, `At ${bn}`].map((c) => h('th', {scope: 'col'}, c)))),
                h('tbody', {}, d.map((r) => h('tr', {class: `diff-${r.change}`},
                  h('td', {class: 'mono'}, r.path), h('td', {}, r.change),
                  h('td', {class: 'mono'}, short(r.before)), h('td', {class: 'mono'}, short(r.after))))))
              : h('p', {}, 'No difference: the state is the same.'));
        } catch (e) {
          fill(diffBox, h('p', {class: 'form-err'}, problemText(e)));
        }
      };
      cmpSel.addEventListener('change', compareTo);
      const isRoot = cp.task === 'root';
      fill(body,
        h('h3', {}, `Fact ${cp.fact} · node ${cp.node || ''} · task ${cp.task || ''}`),
        h('pre', {class: 'json state-json', tabindex: 0, 'aria-label': `State at fact ${cp.fact}`}, pretty(cp.state)),
        h('div', {class: 'field-inline'}, h('label', {for: 'cp-compare'}, 'Compare with checkpoint'), ' ', cmpSel),
        diffBox,
        isRoot
          ? h('button', {type: 'button', class: 'btn', id: 'fork-open', onclick: () => openFork(cp, forkBox)}, `Fork from fact ${cp.fact}…`)
          : h('p', {class: 'hint'}, 'Forks start from a root-task checkpoint.'),
        forkBox);
      compareTo();
      if (fork && isRoot) openFork(cp, forkBox);
      title.focus();
    } catch (e) {
      if (my === gen) fill(body, h('p', {class: 'form-err'}, problemText(e)));
    }
  }

  function openFork(cp, box) {
    const schema = flow && flow.state_schema ? flow.state_schema : {type: 'object'};
    const fields = Object.keys((schema && schema.properties) || {});
    const form = schemaForm(schema, {value: cp.state, fields, label: 'State', idPrefix: 'fork'});
    // What the form holds before any edit: a field is sent only when the
    // user changed it from this (not when the form merely shows it).
    const shown = form.value() || {};
    const status = h('p', {class: 'status', role: 'status', 'aria-live': 'polite'});
    const go = h('button', {type: 'submit', class: 'btn'}, 'Start the fork');
    fill(box, h('form', {
      class: 'card fork', novalidate: true, 'aria-label': `Fork from fact ${cp.fact}`,
      async onsubmit(e) {
        e.preventDefault();
        const r = form.submit();
        if (!r.ok) { status.textContent = 'Fix the marked fields.'; return; }
        const set = {};
        for (const k of fields) {
          const v = r.value ? r.value[k] : undefined;
          if (v !== undefined && stable(v) !== stable(shown[k])) set[k] = v;
        }
        go.disabled = true;
        status.textContent = Object.keys(set).length ? `Forking with ${Object.keys(set).join(', ')} changed…` : 'Forking with the state as it was…';
        try {
          const v = await api(`/v1/runs/${runId}/fork`, {method: 'POST', body: {checkpoint: cp.fact, set, wait: 1}});
          if (!v.run) throw new Error('the server did not name the new run');
          location.hash = `#/run/${v.run}`;
        } catch (err) {
          go.disabled = false;
          if (err.status === 422) form.serverError(err.problem.detail);
          status.textContent = problemText(err);
        }
      },
    },
    h('h3', {}, `Fork from fact ${cp.fact}`),
    h('p', {class: 'hint'}, 'A new run starts from this checkpoint; fields you change are decoded against state_schema by the server.'),
    form.el, h('div', {class: 'actions'}, go), status));
    const first = box.querySelector('input, select, textarea');
    if (first) first.focus();
  }

  return {el, show, setFlow(f) { flow = f; }};
}
