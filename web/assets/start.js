// Start a run: a FlowSpec document from a file (or pasted, or the sources
// a recorded run used: `#/start?from=RUN`), its input from a form generated
// from the input node's schema, then `POST /v1/runs` and the run page.

import {api, apiText} from './api.js';
import {objectSchema, schemaForm} from './form.js';
import {fill, h, problemText} from './ui.js';

export function mount(root, params) {
  const file = h('input', {id: 'flow-file', type: 'file', accept: '.json,application/json'});
  const moduleFiles = h('input', {id: 'module-files', type: 'file', accept: '.json,application/json', multiple: true});
  const text = h('textarea', {id: 'flow-text', rows: 8, class: 'mono', spellcheck: 'false', placeholder: '{"spec_version": "1.0.0", …}'});
  const name = h('input', {id: 'flow-name', type: 'text', value: 'flow.json', spellcheck: 'false', 'aria-describedby': 'flow-name-hint'});
  const about = h('div', {class: 'about', 'aria-live': 'polite'});
  const inputBox = h('div', {class: 'input-box'});
  const status = h('p', {class: 'status', role: 'status', 'aria-live': 'polite'});
  const startBtn = h('button', {type: 'submit', class: 'btn', disabled: true}, 'Start run');
  let modules = {};
  let form = null;

  fill(root,
    h('div', {class: 'page-head'}, h('h1', {}, 'Start a run')),
    h('form', {class: 'card start', novalidate: true, 'aria-label': 'Start a run', onsubmit: submit},
      h('div', {class: 'field'}, h('label', {for: 'flow-file'}, 'FlowSpec file'), file),
      h('div', {class: 'field'}, h('label', {for: 'flow-text'}, 'or the document'), text),
      h('div', {class: 'field'}, h('label', {for: 'flow-name'}, 'Module name'), name,
        h('p', {class: 'hint', id: 'flow-name-hint'}, 'The server binds Tools by this name in its --tools flow.toml (e.g. triage.json).')),
      h('div', {class: 'field'}, h('label', {for: 'module-files'}, 'Other modules (subgraph targets), optional'), moduleFiles),
      about,
      h('h2', {}, 'Input'),
      inputBox,
      h('div', {class: 'actions'}, startBtn),
      status));

  function parse() {
    let doc;
    try {
      doc = JSON.parse(text.value);
    } catch (e) {
      fill(about, text.value.trim() ? h('p', {class: 'form-err'}, `The document does not parse: ${e.message}`) : null);
      fill(inputBox);
      form = null;
      startBtn.disabled = true;
      return;
    }
    const input = (doc.nodes || []).find((n) => n.type === 'input');
    const req = (doc.state_schema && doc.state_schema.required) || [];
    const schema = objectSchema(input && input.output_schema, req);
    form = schemaForm(schema, {label: 'Input', idPrefix: 'in', value: initialInput});
    fill(about, h('p', {}, h('strong', {}, doc.name || doc.id || 'Unnamed flow'), doc.id ? ` (${doc.id})` : ''),
      doc.description ? h('p', {class: 'hint'}, doc.description) : null);
    fill(inputBox, form.el);
    startBtn.disabled = false;
  }

  let initialInput;
  text.addEventListener('input', parse);
  file.addEventListener('change', async () => {
    const f = file.files[0];
    if (!f) return;
    text.value = await f.text();
    name.value = f.name;
    parse();
  });
  moduleFiles.addEventListener('change', async () => {
    modules = {};
    for (const f of moduleFiles.files) modules[f.name] = await f.text();
  });

  async function submit(e) {
    e.preventDefault();
    if (!form) return;
    const r = form.submit();
    if (!r.ok) {
      status.textContent = 'Fix the marked fields.';
      return;
    }
    startBtn.disabled = true;
    status.textContent = 'Starting…';
    try {
      const body = {flow: text.value, name: name.value.trim() || 'flow.json', input: r.value};
      if (Object.keys(modules).length) body.modules = modules;
      const v = await api('/v1/runs', {method: 'POST', body});
      location.hash = `#/run/${v.run}`;
    } catch (err) {
      startBtn.disabled = false;
      status.textContent = problemText(err);
      if (err.problem && err.problem.diagnostics) {
        status.append(h('ul', {}, err.problem.diagnostics.map((d) => h('li', {}, d.message || JSON.stringify(d)))));
      }
      if (err.status === 422 && form) form.serverError(err.problem.detail);
    }
  }

  // `?from=RUN`: the recorded sources and input of that run.
  const from = params.get('from');
  if (from) {
    (async () => {
      try {
        const page = await api(`/v1/runs/${from}/facts?fact=1`);
        const start = page.facts[0].fact;
        const entry = start.entry.module;
        for (const s of page.sources) {
          const t = await apiText(`/v1/runs/${from}/sources/${encodeURIComponent(s.module)}`);
          if (s.module === entry) text.value = t;
          else modules[s.module] = t;
        }
        name.value = entry;
        initialInput = start.input;
        parse();
        status.textContent = `Prefilled from ${from}.`;
      } catch (err) {
        status.textContent = problemText(err);
      }
    })();
  }
}

