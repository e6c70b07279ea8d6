// A run, live: its graph with the node being executed highlighted, the
// fact timeline fed by the run's SSE stream (reconnecting with
// Last-Event-ID, visibly), the chain verification, the calls it waits on,
// lineage (a fork's "Diff with parent": diff.js), replay with its
// verdict, checkpoints, fork, archive and halt.

import {api, apiBlob, apiText, stream} from './api.js';
import {checkpointPanel} from './checkpoint.js';
import {faultCall, gantt} from './gantt.js';
import {draw} from './graph.js';
import {callCard} from './inbox.js';
import {authorOrder} from './order.js';
import {openWhatIf} from './whatif.js';
import {summary, timeline} from './timeline.js';
import {download, fill, h, onState, pretty, problemText, shortHash, shortRun, stateBadge, time, toast} from './ui.js';

const KINDS = ['', 'Start', 'Checkpoint', 'Call', 'Reply', 'Close', 'End'];

export function mount(root, runId) {
  const title = h('h1', {class: 'run-title'}, 'Run ', h('span', {class: 'mono'}, runId));
  const flowLine = h('p', {class: 'flow-line'});
  const badge = h('span', {class: 'run-state', 'aria-live': 'polite'});
  const actions = h('div', {class: 'actions run-actions'});
  const meta = h('dl', {class: 'meta-grid'});
  const lineage = h('nav', {class: 'lineage', 'aria-label': 'Lineage'});
  const verify = h('p', {class: 'verify', role: 'status', 'aria-live': 'polite'}, 'Checking the chain…');
  const verdict = h('div', {class: 'verdict', role: 'status', 'aria-live': 'polite'});
  const pending = h('section', {class: 'pending', 'aria-label': 'Waiting on a person', hidden: true});
  const live = h('p', {class: 'live', role: 'status', 'aria-live': 'polite'}, 'Connecting…');
  const count = h('span', {class: 'count-facts'}, '0 facts');
  const graphBox = h('div', {class: 'graph-box'});
  const tlBox = h('div', {class: 'tl-box'});
  const ganttBox = h('div', {class: 'gantt-box'}, h('p', {class: 'hint'}, 'Loading the timeline…'));
  const faultBox = h('section', {class: 'fault-view panel', 'aria-labelledby': 'fault-title', hidden: true});
  const detail = h('div', {class: 'detail', 'aria-live': 'polite'}, h('p', {class: 'hint'}, 'Choose a fact to see it whole.'));
  const kindSel = h('select', {id: 'tl-kind', onchange: (e) => tl.filter(e.target.value)},
    KINDS.map((k) => h('option', {value: k}, k || 'all kinds')));

  let view = null;
  let backlogHead = null; // the last fact when the page first read the run
  let flow = null;
  let graph = null;
  let ended = false;
  let endSeen = false;
  let disposed = false;
  const lastFact = h('span', {class: 'mono'});
  const visited = new Set();
  const openCalls = new Map(); // call → node
  const calls = new Map(); // call → {node, tool, outcome}: what a fault view names
  let lastCall = null;
  let current = null;
  let times = null; // GET …/timeline: the calls' spans, the fault pinpointed
  const cps = []; // root checkpoints {n, node}

  const cpPanel = checkpointPanel(runId, {checkpoints: () => cps});
  const tl = timeline(tlBox, {label: `Facts of ${runId}`, onSelect: showFact});

  fill(root,
    h('div', {class: 'page-head run-head'}, h('div', {}, title, flowLine), badge),
    actions, meta, lineage, verify, verdict, faultBox, pending,
    h('div', {class: 'run-grid'},
      h('section', {class: 'panel', 'aria-labelledby': 'graph-title'},
        h('h2', {id: 'graph-title'}, 'Graph'),
        graphBox,
        h('p', {class: 'legend', 'aria-label': 'Legend'},
          h('span', {class: 'lg lg-direct'}, 'direct'), h('span', {class: 'lg lg-conditional'}, 'conditional'),
          h('span', {class: 'lg lg-fail'}, 'fail branch'), h('span', {class: 'lg lg-current'}, 'executing'),
          h('span', {class: 'lg lg-waiting'}, 'waiting'), h('span', {class: 'lg lg-failed'}, 'failed here'))),
      h('section', {class: 'panel', 'aria-labelledby': 'tl-title'},
        h('div', {class: 'panel-head'}, h('h2', {id: 'tl-title'}, 'Facts ', count),
          h('label', {for: 'tl-kind', class: 'field-inline'}, 'Show ', kindSel)),
        live, tlBox, detail)),
    h('section', {class: 'panel', 'aria-labelledby': 'gantt-title'},
      h('h2', {id: 'gantt-title'}, 'Timeline'), ganttBox),
    cpPanel.el);

  // Facts arrive in batches (the backlog comes in large chunks): collect
  // them and render once per frame.
  let batch = [];
  let frame = 0;
  function flush() {
    frame = 0;
    if (!batch.length) return;
    const b = batch;
    batch = [];
    for (const f of b) {
      const node = f.fact.node;
      if (f.kind === 'Checkpoint' && node) {
        visited.add(node);
        current = node;
        if (f.fact.task === 'root') cps.push({n: f.n, node});
      } else if (f.kind === 'Call') {
        if (node) { visited.add(node); current = node; }
        openCalls.set(f.fact.call, node);
        calls.set(f.fact.call, {node, tool: f.fact.tool});
        lastCall = f.fact.call;
      } else if (f.kind === 'Reply' || f.kind === 'Close') {
        openCalls.delete(f.fact.call);
        const c = calls.get(f.fact.call);
        if (c && f.kind === 'Reply') c.outcome = f.fact.outcome;
      }
    }
    // The backlog came all at once: only facts recorded while the page
    // watched have an arrival time worth showing.
    const now = performance.timeOrigin + performance.now();
    const cut = backlogHead === null ? Infinity : backlogHead;
    const old = b.filter((f) => f.n <= cut);
    const fresh = b.filter((f) => f.n > cut);
    if (old.length) tl.add(old, null);
    if (fresh.length) tl.add(fresh, now);
    count.textContent = `${tl.length} fact${tl.length === 1 ? '' : 's'}`;
    lastFact.textContent = String(tl.facts[tl.length - 1].n);
    showVerified();
    markGraph();
    if (ended && !endSeen) { endSeen = true; refresh(); checkChain(); }
  }
  function markGraph() {
    if (!graph) return;
    const waiting = new Set(view && view.state === 'paused' ? [...openCalls.values()].filter(Boolean) : []);
    // A faulted run failed at its failing call's node (the timeline's
    // fault), or else at its last node.
    const pin = times && times.fault && times.fault.call ? times.fault.call.node : null;
    const failed = view && view.state === 'faulted' ? (pin || current) : null;
    graph.mark(ended ? null : current, visited, waiting, failed);
  }

  let drops = 0;
  const feed = stream(`/v1/runs/${runId}/events?states=true`, {
    onEvent(e) {
      if (e.event === 'state') {
        let d = null;
        try { d = JSON.parse(e.data); } catch { return; }
        // The calls out are known again at the refresh below.
        if (view) { view.state = d.state; view.callsOut = null; showState(); }
        refreshSoon();
        if (d.state === 'paused' || d.state === 'halted') checkChain();
        return;
      }
      let fact;
      try { fact = JSON.parse(e.data); } catch { return; }
      // Known at once, so the stream's close after End is not a drop.
      if (e.event === 'End') ended = true;
      // Start names the program: draw it without waiting for the run view.
      if (e.event === 'Start' && fact.entry) loadProgram(fact.entry.module);
      batch.push({n: Number(e.id), kind: e.event, fact});
      if (!frame) frame = requestAnimationFrame(flush);
    },
    onStatus(s, {attempt, lastId: last, error: err}) {
      if (s === 'live') {
        live.textContent = drops ? `Reconnected — resumed after fact ${last || 0} (Last-Event-ID), nothing missed.` : 'Live: facts appear as they are recorded.';
        live.className = 'live live-on';
      } else if (s === 'reconnecting') {
        drops += 1;
        live.textContent = `Connection lost — reconnecting (try ${attempt}); will resume after fact ${last || 0}…`;
        live.className = 'live live-lost';
      } else if (s === 'ended') {
        live.textContent = `The history is complete (End at fact ${last}).`;
        live.className = 'live live-done';
      } else if (s === 'error') {
        live.textContent = problemText(err);
        live.className = 'live live-lost';
      }
    },
    done: () => ended,
  });

  function showState() {
    fill(badge, stateBadge(view.state), view.driving ? h('span', {class: 'sub'}, ' driven by this server') : null);
    fill(actions,
      h('button', {type: 'button', class: 'btn', onclick: replay}, 'Replay'),
      ...haltActions(),
      ...continueActions(),
      view.parent ? h('a', {class: 'btn-quiet', href: `#/diff/${view.parent.run}/${runId}`, title: 'This fork beside its parent, from the checkpoint it was forked at'}, 'Diff with parent') : null,
      h('button', {type: 'button', class: 'btn-quiet', onclick: archive}, 'Download archive'),
      h('a', {class: 'btn-quiet', href: `#/start?from=${runId}`}, 'Start again'));
    markGraph();
  }

  async function refresh() {
    try {
      view = await api(`/v1/runs/${runId}`);
    } catch (e) {
      fill(meta, h('p', {class: 'form-err'}, problemText(e)));
      return;
    }
    if (disposed) return;
    if (backlogHead === null) backlogHead = view.lastFact.n;
    loadProgram(view.entry.module);
    showState();
    fill(meta,
      h('dt', {}, 'Entry'), h('dd', {class: 'mono'}, `${view.entry.module}#${view.entry.function}`),
      h('dt', {}, 'Started'), h('dd', {}, time(view.createdMs)),
      h('dt', {}, 'Last change'), h('dd', {}, time(view.updatedMs)),
      h('dt', {}, 'Last fact'), h('dd', {class: 'mono'}, lastFact),
      view.exit ? [h('dt', {}, 'Exit'), h('dd', {class: 'mono'}, view.exit)] : null,
      view.output !== null ? [h('dt', {}, 'Output'), h('dd', {}, h('pre', {class: 'json small'}, pretty(view.output)))] : null,
      view.fault ? [h('dt', {}, 'Fault'), h('dd', {class: 'mono'}, typeof view.fault === 'string' ? view.fault : JSON.stringify(view.fault))] : null,
      view.fault && current ? [h('dt', {}, 'Failed at'), h('dd', {class: 'failed-at'}, failedAt())] : null);
    showLineage();
    showPending();
    loadTimeline();
  }

  // The Gantt of the calls and the fault pinpointed, from the timeline.
  async function loadTimeline() {
    try {
      times = await api(`/v1/runs/${runId}/timeline`);
    } catch (e) {
      fill(ganttBox, h('p', {class: 'form-err'}, problemText(e)));
      return;
    }
    if (disposed) return;
    gantt(ganttBox, times, (c) => tl.show(c.fact));
    const f = times.fault;
    faultBox.hidden = !f;
    if (f) {
      fill(faultBox, h('h2', {id: 'fault-title'}, 'Where it failed'),
        h('p', {class: 'mono'}, f.why),
        f.call ? faultCall(f.call) : h('p', {class: 'sub'}, `No call failed: the run faulted at fact ${f.fact}.`));
    }
    markGraph();
  }
  // The node a faulted run ended in and, when its last fact there was a
  // Tool call, that call, its Tool and what it answered.
  function failedAt() {
    const c = lastCall && calls.get(lastCall);
    if (!c || c.node !== current) return ['node ', h('code', {}, current)];
    const answered = c.outcome === undefined ? 'never answered'
      : ['answered ', h('code', {}, clip(JSON.stringify(c.outcome), 300))];
    return ['node ', h('code', {}, current), ', call ', h('code', {}, lastCall), ' to ', h('code', {}, c.tool), ', ', answered];
  }
  const clip = (text, max) => (text.length > max ? `${text.slice(0, max)}…` : text);

  let refreshTimer = 0;
  function refreshSoon() {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(refresh, 120);
  }

  async function showLineage() {
    const chain = [];
    let at = view;
    for (let i = 0; i < 5 && at && (at.parent || at.outer); i++) {
      const up = at.parent || at.outer;
      chain.unshift({run: up.run, how: at.parent
        ? `forked at fact ${at.parent.checkpoint}${at.parent.recovery ? ` by recovery ${at.parent.recovery}` : ''}`
        : `nested for ${at.outer.call}`});
      try { at = await api(`/v1/runs/${up.run}`); } catch { at = null; }
    }
    if (disposed) return;
    const kids = view.children || [];
    if (!chain.length && !kids.length) { fill(lineage); return; }
    let node = h('li', {}, h('strong', {'aria-current': 'page', class: 'mono'}, shortRun(runId)), ' (this run)',
      kids.length ? h('ul', {}, kids.map((c) => h('li', {},
        h('a', {href: `#/run/${c.run}`, class: 'mono', title: c.run}, shortRun(c.run)),
        c.kind === 'fork' ? ` fork from fact ${c.checkpoint}` : ` nested run for ${c.call}`))) : null);
    for (const p of chain.reverse()) {
      node = h('li', {}, h('a', {href: `#/run/${p.run}`, class: 'mono', title: p.run}, shortRun(p.run)), h('ul', {}, h('li', {class: 'how'}, p.how, h('ul', {}, node))));
    }
    fill(lineage, h('h2', {}, 'Lineage'), h('ul', {class: 'tree'}, node));
  }

  let cards = [];
  let pendingGen = 0;
  async function showPending() {
    const my = ++pendingGen;
    for (const c of cards) c.dispose();
    cards = [];
    const calls = (view.pending || []).filter((c) => c.tool === 'std/human#input' && view.state === 'paused');
    pending.hidden = calls.length === 0;
    if (!calls.length) { fill(pending); return; }
    const schemas = await Promise.all(calls.map((c) => authorOrder({run: runId, node: c.node, schema: c.schema}, flow)));
    if (my !== pendingGen || disposed) return;
    for (const c of cards) c.dispose();
    cards = calls.map((c, i) => callCard({
      run: runId, call: c.call, node: c.node, tool: c.tool, prompt: c.prompt, schema: schemas[i],
      fact: c.fact, sinceMs: view.updatedMs, dueMs: null,
    }, {showRun: false, onDone: refreshSoon}));
    fill(pending, h('h2', {}, 'Waiting on a person'), cards);
    // The inbox knows the deadlines.
    api(`/v1/calls?state=open&run=${encodeURIComponent(runId)}&limit=1000`).then((v) => {
      for (const card of cards) {
        const c = v.calls.find((x) => x.run === runId && x.call === card.dataset.call);
        if (c) card.setDue(c.dueMs);
      }
    }).catch(() => {});
  }

  // The banner speaks of the facts the page shows: those the server
  // checked, and any that arrived after the check.
  let verified = null;
  function showVerified() {
    if (!verified) return;
    const shown = tl.length ? tl.facts[tl.length - 1].n : 0;
    verify.className = 'verify verify-ok';
    // The check may run ahead of the live feed (it read facts the page
    // has yet to show) or behind it (facts arrived since).
    verify.textContent = shown > verified.facts
      ? `Chain verified by the server up to fact ${verified.facts} (head ${shortHash(verified.head)}, checked at ${verified.at}); facts ${verified.facts + 1}–${shown} arrived since and are checked at the next pause and at End.`
      : shown < verified.facts
        ? `Chain verified by the server up to fact ${verified.facts} (head ${shortHash(verified.head)}, checked at ${verified.at}); the page shows ${shown} so far.`
        : `Chain verified by the server: ${verified.facts} facts, each hash linked to the one before and every blob checked; head ${shortHash(verified.head)} (checked at ${verified.at}; again at each pause and at End).`;
  }

  async function checkChain() {
    try {
      const v = await api(`/v1/runs/${runId}/verify`);
      if (disposed) return;
      if (v.verified) {
        verified = {facts: v.facts, head: v.head && v.head.hash, at: new Date().toLocaleTimeString()};
        showVerified();
      } else {
        verified = null;
        verify.className = 'verify verify-bad';
        verify.textContent = `Chain NOT verified: ${v.fact ? `fact ${v.fact}: ` : ''}${v.reason}`;
        if (v.fact) { tl.mark(new Map([[v.fact, 'diverged']])); tl.show(v.fact); }
      }
    } catch (e) {
      verify.className = 'verify verify-bad';
      verify.textContent = `Chain check failed: ${problemText(e)}`;
    }
  }

  async function replay() {
    fill(verdict, h('p', {}, 'Replaying against the history…'));
    try {
      const v = await api(`/v1/runs/${runId}/replay`, {method: 'POST'});
      if (v.verdict === 'diverged') {
        fill(verdict, h('p', {class: 'verdict-diverged'}, h('strong', {}, 'Replay diverged'), ` at fact ${v.fact}: ${v.reason}`));
        tl.mark(new Map([[v.fact, 'diverged']]));
        tl.show(v.fact);
      } else {
        fill(verdict, h('p', {class: `verdict-${v.verdict}`}, h('strong', {}, `Replay ${v.verdict}`),
          v.verdict === 'matched' ? ': the program re-derives every recorded fact.' : ': the history matches so far and has no End yet.'));
        tl.mark(new Map());
      }
    } catch (e) {
      fill(verdict, h('p', {class: 'form-err'}, problemText(e)));
    }
  }

  // Halt waits for the calls out to finish (nothing is left open); while
  // it waits, "Halt now" stops at once and leaves them for Continue to
  // decide.
  let halting = false;
  function haltActions() {
    if (!['running', 'paused'].includes(view.state)) return [];
    if (!halting) return [h('button', {type: 'button', class: 'btn btn-danger', onclick: () => halt(false)}, 'Halt')];
    return [
      h('span', {class: 'sub halting'}, 'Halting: waiting for the calls out to finish… '),
      h('button', {type: 'button', class: 'btn btn-danger', onclick: () => halt(true), title: 'Stop at once: the calls out are left open, and Continue asks what to do with them'}, 'Halt now'),
    ];
  }

  async function halt(force) {
    halting = true;
    showState();
    try {
      await api(`/v1/runs/${runId}/halt`, {method: 'POST', body: force ? {force: true} : undefined});
      toast('Halted');
      refreshSoon();
    } catch (e) { toast(problemText(e), 'error'); }
    halting = false;
    showState();
  }

  // Continue after a halt. A halt that waited for the calls out leaves
  // none out: one button. After a forced halt the calls that were out may
  // or may not have happened, and the user decides (the seed's host
  // decision): send them again, or settle them Unknown.
  function continueActions() {
    if (view.state !== 'halted' || !view.callsOut) return [];
    const out = view.callsOut;
    if (out.length === 0) return [h('button', {type: 'button', class: 'btn', onclick: () => cont()}, 'Continue')];
    return [
      h('span', {class: 'sub'}, `${out.length === 1 ? 'A call was' : `${out.length} calls were`} out at the halt (${out.join(', ')}): `),
      h('button', {type: 'button', class: 'btn', onclick: () => cont('resend'), title: 'Send each call again under the same call id: it may run twice'}, 'Continue: send again'),
      h('button', {type: 'button', class: 'btn', onclick: () => cont('unknown'), title: 'Settle each call Unknown: it may or may not have happened'}, 'Continue: settle Unknown'),
    ];
  }

  async function cont(open) {
    try {
      await api(`/v1/runs/${runId}/resume`, {method: 'POST', body: open ? {open} : {}});
      toast('Continuing');
      refreshSoon();
    } catch (e) { toast(problemText(e), 'error'); }
  }

  async function archive() {
    try {
      download(await apiBlob(`/v1/runs/${runId}/archive`), `${runId}.tar`);
      toast('Archive downloaded');
    } catch (e) { toast(problemText(e), 'error'); }
  }

  function showFact(f) {
    const parts = [h('h3', {}, `Fact ${f.n}: ${f.kind}`), h('p', {class: 'mono small'}, summary(f.kind, f.fact))];
    if (f.kind === 'Checkpoint') {
      parts.push(h('div', {class: 'actions'},
        h('button', {type: 'button', class: 'btn-quiet', onclick: () => cpPanel.show(f.n)}, 'State'),
        f.fact.task === 'root' ? h('button', {type: 'button', class: 'btn-quiet', onclick: () => cpPanel.show(f.n, {fork: true})}, 'Fork from here') : null));
    }
    const whatIfBox = h('div', {class: 'whatif-box'});
    if (f.kind === 'Reply') {
      parts.push(h('div', {class: 'actions'},
        h('button', {type: 'button', class: 'btn-quiet', title: 'Fork from the checkpoint before this call, with another reply', onclick: () => openWhatIf(runId, f, whatIfBox)}, 'What if…')));
    }
    parts.push(whatIfBox);
    parts.push(h('pre', {class: 'json', tabindex: 0, 'aria-label': `Fact ${f.n} as recorded`}, jsonView(f.fact, '', new Set((view && view.holes) || []))));
    fill(detail, parts);
  }

  // Load what the page shows besides the stream: the run, its program,
  // the chain check.
  let programLoading = false;
  async function loadProgram(module) {
    if (programLoading) return;
    programLoading = true;
    try {
      const text = await apiText(`/v1/runs/${runId}/sources/${encodeURIComponent(module)}`);
      if (disposed) return;
      flow = JSON.parse(text);
      cpPanel.setFlow(flow);
      fill(flowLine, h('strong', {}, flow.name || flow.id || module), flow.id ? h('span', {class: 'sub mono'}, ` ${flow.id}`) : null);
      graph = draw(graphBox, flow, (id) => {
        const last = [...tl.facts].reverse().find((x) => x.fact.node === id);
        if (last) tl.show(last.n);
      });
      markGraph();
    } catch (e) {
      fill(graphBox, h('p', {class: 'form-err'}, `The recorded program: ${problemText(e)}`));
    }
  }
  refresh().then(() => { if (view) checkChain(); });

  const off = onState((d) => { if (d.resync || d.run === runId) refreshSoon(); });
  return {
    dispose() {
      disposed = true;
      feed.close();
      off();
      clearTimeout(refreshTimer);
      for (const c of cards) c.dispose();
    },
  };
}

/** A stored fact or value as text, with each large value (`$blob`) a button that loads it, and each redacted one (`$hole`, docs/custody.md "Holes") said so. */
function jsonView(v, indent = '', holes = new Set()) {
  const out = [];
  const walk = (x, ind) => {
    const hole = x && typeof x === 'object' && !Array.isArray(x) && Object.keys(x).length === 2
      && ((typeof x.$hole === 'string' && x.$hole) || (typeof x.$blob === 'string' && holes.has(x.$blob) && x.$blob));
    if (hole) {
      out.push(h('span', {class: 'hole', title: `a hole: the value (${x.length} bytes, ${hole}) was redacted; the chain still verifies`}, `redacted (${x.length} bytes)`));
    } else if (x && typeof x === 'object' && !Array.isArray(x) && typeof x.$blob === 'string') {
      const btn = h('button', {type: 'button', class: 'blob-btn'}, `large value, ${x.length} bytes — load ${shortHash(x.$blob)}`);
      const slot = h('span', {}, btn);
      btn.addEventListener('click', async () => {
        btn.disabled = true;
        btn.textContent = 'Loading…';
        try {
          const text = await (await apiBlob(`/v1/blobs/${x.$blob}`)).text();
          fill(slot, jsonView(JSON.parse(text), ind, holes));
        } catch (e) {
          btn.disabled = false;
          btn.textContent = `Could not load: ${problemText(e)}`;
        }
      });
      out.push(slot);
    } else if (Array.isArray(x)) {
      if (!x.length) { out.push('[]'); return; }
      out.push('[\n');
      x.forEach((y, i) => { out.push(`${ind}  `); walk(y, `${ind}  `); out.push(i < x.length - 1 ? ',\n' : '\n'); });
      out.push(`${ind}]`);
    } else if (x && typeof x === 'object') {
      const keys = Object.keys(x);
      if (!keys.length) { out.push('{}'); return; }
      out.push('{\n');
      keys.forEach((k, i) => {
        out.push(`${ind}  ${JSON.stringify(k)}: `);
        walk(x[k], `${ind}  `);
        out.push(i < keys.length - 1 ? ',\n' : '\n');
      });
      out.push(`${ind}}`);
    } else {
      out.push(JSON.stringify(x));
    }
  };
  walk(v, indent);
  const span = h('span');
  for (const o of out) span.append(o);
  return span;
}
