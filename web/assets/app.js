// The dashboard's entry: a hash router over the views, the token dialog,
// and one `/v1/events` stream shared by every view (browsers allow few
// connections per origin; a run page adds only its own fact stream).

import {api, onAuthNeeded, setToken, stream, token} from './api.js';
import {emitState, fill, onState, toast} from './ui.js';
import * as runs from './runs.js';
import * as run from './run.js';
import * as inbox from './inbox.js';
import * as share from './share.js';
import * as start from './start.js';
import * as gate from './gate.js';
import * as diff from './diff.js';

const main = document.getElementById('main');
let current = null; // {view, dispose}

function route() {
  const hash = location.hash.replace(/^#/, '') || '/';
  const [path, query = ''] = hash.split('?');
  const params = new URLSearchParams(query);
  const parts = path.split('/').filter(Boolean);
  if (current && current.dispose) current.dispose();
  current = null;
  document.getElementById('toast').hidden = true;
  fill(main);
  let view;
  if (parts[0] === 'run' && parts[1]) view = run.mount(main, decodeURIComponent(parts[1]), params);
  else if (parts[0] === 'inbox') view = inbox.mount(main, params);
  else if (parts[0] === 'share') view = share.mount(main, params);
  else if (parts[0] === 'start') view = start.mount(main, params);
  else if (parts[0] === 'gate') view = gate.mount(main, params);
  else if (parts[0] === 'diff' && parts[1] && parts[2]) view = diff.mount(main, decodeURIComponent(parts[1]), decodeURIComponent(parts[2]));
  else view = runs.mount(main, params);
  current = view || null;
  for (const a of document.querySelectorAll('nav a')) {
    const target = a.getAttribute('href').replace(/^#/, '');
    const on = target === '/' ? parts.length === 0 : path.startsWith(target);
    if (on) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  main.focus({preventScroll: true});
}

// The state feed: reconnects with Last-Event-ID; `resync` means changes
// may have been missed, so views re-read what they show.
const conn = document.getElementById('conn');
function feedStatus(s, {attempt}) {
  const text = {
    connecting: 'Connecting…',
    live: 'Live',
    reconnecting: `Connection lost — reconnecting${attempt > 1 ? ` (try ${attempt})` : ''}…`,
    ended: 'Disconnected',
    error: 'Not connected (see token)',
  }[s] || s;
  conn.textContent = text;
  conn.className = `conn conn-${s}`;
}

let feed = null;
function startFeed() {
  if (feed) feed.close();
  feed = stream('/v1/events', {
    onEvent(e) {
      if (e.event === 'resync') {
        emitState({resync: true});
        return;
      }
      if (e.event !== 'state') return;
      let d;
      try { d = JSON.parse(e.data); } catch { return; }
      emitState(d);
    },
    onStatus: feedStatus,
  });
}

// The inbox badge: how many calls wait on a person.
const badge = document.getElementById('inbox-count');
let badgeTimer = 0;
async function refreshBadge() {
  try {
    // The inbox counts what it holds: one call fetched, the total read.
    const v = await api('/v1/calls?state=open&limit=1');
    const n = v.total;
    badge.textContent = n ? String(n) : '';
    badge.hidden = n === 0;
    badge.setAttribute('aria-label', `${n} waiting`);
  } catch { /* shown by the token dialog */ }
}
onState(() => {
  clearTimeout(badgeTimer);
  badgeTimer = setTimeout(refreshBadge, 150);
});

// The token: entered once, kept for the session (sessionStorage), sent as
// Bearer. With no tokens configured the API answers without one.
const dialog = document.getElementById('token-dialog');
const tokenForm = document.getElementById('token-form');
const tokenInput = document.getElementById('token-input');
const tokenMsg = document.getElementById('token-msg');
function askToken(problem) {
  if (dialog.open) return;
  tokenMsg.textContent = problem && problem.detail ? problem.detail : 'This server needs a token.';
  tokenInput.value = token();
  dialog.showModal();
  tokenInput.focus();
}
onAuthNeeded(askToken);
document.getElementById('token-btn').addEventListener('click', () => askToken({detail: token() ? 'Change or clear the token for this session.' : 'Enter a token if this server needs one.'}));
tokenForm.addEventListener('submit', (e) => {
  e.preventDefault();
  setToken(tokenInput.value.trim());
  dialog.close();
  toast(tokenInput.value.trim() ? 'Token saved for this session' : 'Token cleared');
  startFeed();
  refreshBadge();
  route();
});
document.getElementById('token-cancel').addEventListener('click', () => dialog.close());

window.addEventListener('hashchange', route);
startFeed();
refreshBadge();
route();

