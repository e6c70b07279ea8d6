// Import a run archive (`POST /v1/archives`, a tar as exported by
// `GET /v1/runs/{run}/archive`): the server verifies the chain and every
// blob before it writes anything, and says what it did.

import {api} from './api.js';
import {fill, h, problemText} from './ui.js';

export function mount(root) {
  const file = h('input', {id: 'archive-file', type: 'file', accept: '.tar,application/x-tar'});
  const result = h('div', {class: 'result', role: 'status', 'aria-live': 'polite'});
  const btn = h('button', {type: 'submit', class: 'btn'}, 'Import');
  fill(root,
    h('div', {class: 'page-head'}, h('h1', {}, 'Import a run archive')),
    h('p', {class: 'lede'}, 'An archive downloaded from a run page (or made by flow export). Nothing is written unless its whole chain and every blob verify; importing the same archive twice changes nothing.'),
    h('form', {
      class: 'card', 'aria-label': 'Import a run archive',
      async onsubmit(e) {
        e.preventDefault();
        const f = file.files[0];
        if (!f) {
          fill(result, h('p', {class: 'form-err'}, 'Choose an archive file first.'));
          file.focus();
          return;
        }
        btn.disabled = true;
        fill(result, h('p', {}, 'Verifying and importing…'));
        try {
          const v = await api('/v1/archives', {method: 'POST', body: new Blob([await f.arrayBuffer()], {type: 'application/x-tar'})});
          fill(result,
            h('p', {class: 'ok'}, v.imported
              ? `Imported ${v.run}: ${v.facts} facts, chain and blobs verified.`
              : `Already here: ${v.run} holds this exact history.`),
            h('p', {}, h('a', {href: `#/run/${v.run}`, class: 'btn'}, 'Open the run')));
        } catch (err) {
          fill(result, h('p', {class: 'form-err'}, `Refused, nothing was written. ${problemText(err)}`));
        } finally {
          btn.disabled = false;
        }
      },
    },
    h('div', {class: 'field'}, h('label', {for: 'archive-file'}, 'Archive (.tar)'), file),
    h('div', {class: 'actions'}, btn)),
    result);
}
