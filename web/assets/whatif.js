// "What if…" on a recorded Reply (issue 39 §3): a fork from the root
// Checkpoint before the call, the call answered with an edited outcome
// instead of being made again (`POST /v1/runs/{run}/fork {call, reply}`).
// The server decodes the outcome against the call's declared type, as a
// resume's reply; a refusal is shown here and nothing is recorded.

import {api} from './api.js';
import {fill, h, pretty, problemText} from './ui.js';

/** Opens the what-if form for Reply fact `f` of `runId` in `box`. */
export function openWhatIf(runId, f, box) {
  const id = `whatif-${f.n}`;
  const text = h('textarea', {id, class: 'mono', rows: 8, spellcheck: 'false'});
  text.value = pretty(f.fact.outcome);
  const status = h('p', {class: 'status', role: 'status', 'aria-live': 'polite'});
  const go = h('button', {type: 'submit', class: 'btn'}, 'Fork with this reply');
  fill(box, h('form', {
    class: 'card whatif', novalidate: true, 'aria-label': `What if call ${f.fact.call} had replied otherwise`,
    async onsubmit(e) {
      e.preventDefault();
      let reply;
      try {
        reply = JSON.parse(text.value);
      } catch (err) {
        status.textContent = `Not JSON: ${err.message}. A reply is an outcome such as {"Ok": value}.`;
        return;
      }
      go.disabled = true;
      status.textContent = 'Forking…';
      try {
        const v = await api(`/v1/runs/${runId}/fork`, {method: 'POST', body: {call: f.fact.call, reply, wait: 1}});
        if (!v.run) throw new Error('the server did not name the new run');
        location.hash = `#/run/${v.run}`;
      } catch (err) {
        go.disabled = false;
        status.textContent = problemText(err);
      }
    },
  },
  h('h3', {}, `What if ${f.fact.call} had replied…`),
  h('p', {class: 'hint'}, 'A new run starts from the checkpoint before this call; the call is answered with the outcome below instead of being made again. It is decoded against the call\'s declared type.'),
  h('label', {for: id}, 'Outcome'), text,
  h('div', {class: 'actions'}, go), status));
  text.focus();
}
