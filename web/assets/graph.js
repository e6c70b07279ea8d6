// A FlowSpec graph as a layered SVG diagram (no library: a longest-path
// layering of the graph without its back edges, a few barycenter sweeps to
// order each layer, and curves between the boxes). Edge kinds: direct
// (solid), conditional — a condition node's branches or a `conditional`
// edge — (dashed, labelled), fail_branch (dotted, red) and parallel fork
// targets; edges that go back (loops) run around the right side.

import {h} from './ui.js';

const W = 168;
const H = 46;
const GAP_X = 28;
const GAP_Y = 66;
const PAD = 24;

/** Every edge of a flow: {from, to, kind, label}. */
export function edgesOf(flow) {
  const out = [];
  const ids = new Set((flow.nodes || []).map((n) => n.id));
  const add = (from, to, kind, label = '') => {
    if (ids.has(from) && ids.has(to)) out.push({from, to, kind, label});
  };
  for (const e of flow.edges || []) {
    if (e.type === 'conditional') {
      for (const b of e.branches || []) add(e.from, b.to || b.target, 'conditional', b.label || exprText(b.condition));
      if (e.default_target) add(e.from, e.default_target, 'conditional', 'else');
    } else {
      add(e.from, e.to, 'direct', e.label || '');
    }
  }
  for (const n of flow.nodes || []) {
    if (n.type === 'condition') {
      for (const b of n.branches || []) add(n.id, b.target || b.to, 'conditional', b.label || exprText(b.condition));
      if (n.default_target) add(n.id, n.default_target, 'conditional', 'else');
    }
    if (n.type === 'parallel_fork') for (const t of n.targets || []) add(n.id, t, 'parallel', 'fork');
    if (n.fail_branch && n.fail_branch.target) add(n.id, n.fail_branch.target, 'fail', 'on failure');
  }
  return out;
}

function exprText(c) {
  if (!c) return '';
  const t = c.expr || c.fn_ref || '';
  const s = t.replace(/\$\.state\./g, '');
  return s.length > 28 ? `${s.slice(0, 27)}…` : s;
}

/** Positions: {nodes: Map id → {x, y, node}, edges: [{…, back}], width, height}. */
export function layout(flow) {
  const nodes = flow.nodes || [];
  const edges = edgesOf(flow);
  const out = new Map(nodes.map((n) => [n.id, []]));
  for (const e of edges) out.get(e.from).push(e);
  // DFS from the input nodes (then anything unreached) marks back edges.
  const roots = [...nodes.filter((n) => n.type === 'input'), ...nodes];
  const state = new Map(); // 1 on stack, 2 done
  const post = [];
  const visit = (id) => {
    state.set(id, 1);
    for (const e of out.get(id)) {
      const s = state.get(e.to);
      if (s === 1) e.back = true;
      else if (!s) visit(e.to);
    }
    state.set(id, 2);
    post.push(id);
  };
  for (const r of roots) if (!state.get(r.id)) visit(r.id);
  // Longest path over the forward edges, in topological order.
  const layer = new Map(nodes.map((n) => [n.id, 0]));
  for (const id of post.slice().reverse()) {
    for (const e of out.get(id)) {
      if (!e.back) layer.set(e.to, Math.max(layer.get(e.to), layer.get(id) + 1));
    }
  }
  const layers = [];
  for (const id of post.slice().reverse()) {
    const l = layer.get(id);
    (layers[l] = layers[l] || []).push(id);
  }
  // Barycenter sweeps: order each layer by its neighbours' positions.
  const pos = new Map();
  const index = () => layers.forEach((ids) => ids.forEach((id, i) => pos.set(id, i)));
  index();
  const preds = new Map(nodes.map((n) => [n.id, []]));
  const succs = new Map(nodes.map((n) => [n.id, []]));
  for (const e of edges) {
    if (e.back) continue;
    preds.get(e.to).push(e.from);
    succs.get(e.from).push(e.to);
  }
  const bary = (ns, id) => (ns.length ? ns.reduce((a, n) => a + pos.get(n), 0) / ns.length : pos.get(id));
  for (let pass = 0; pass < 4; pass++) {
    const down = pass % 2 === 0;
    const seq = down ? layers.keys() : [...layers.keys()].reverse();
    for (const l of seq) {
      const ids = layers[l];
      if (!ids) continue;
      ids.sort((a, b) => bary(down ? preds.get(a) : succs.get(a), a) - bary(down ? preds.get(b) : succs.get(b), b));
      ids.forEach((id, i) => pos.set(id, i));
    }
  }
  const widest = Math.max(1, ...layers.map((ids) => (ids ? ids.length : 0)));
  const width = PAD * 2 + widest * W + (widest - 1) * GAP_X + (edges.some((e) => e.back) ? 70 : 0);
  const placed = new Map();
  const byId = new Map(nodes.map((n) => [n.id, n]));
  layers.forEach((ids, l) => {
    if (!ids) return;
    const row = ids.length * W + (ids.length - 1) * GAP_X;
    const x0 = PAD + ((widest * W + (widest - 1) * GAP_X) - row) / 2;
    ids.forEach((id, i) => placed.set(id, {x: x0 + i * (W + GAP_X), y: PAD + l * (H + GAP_Y), node: byId.get(id)}));
  });
  const height = PAD * 2 + layers.length * H + Math.max(0, layers.length - 1) * GAP_Y;
  return {nodes: placed, edges, width, height};
}

/**
 * Draws `flow` into `container`. Returns {mark(current, visited, waiting)}
 * to show where a run is; `onSelect(id)` is called when a node is chosen.
 */
export function draw(container, flow, onSelect) {
  const g = layout(flow);
  const svg = h('svg:svg', {
    viewBox: `0 0 ${g.width} ${g.height}`, width: g.width, height: g.height,
    class: 'graph', role: 'group', 'aria-label': `Flow graph: ${g.nodes.size} nodes, ${g.edges.length} edges`,
  });
  const defs = h('svg:defs');
  for (const k of ['direct', 'conditional', 'fail', 'parallel']) {
    defs.append(h('svg:marker', {id: `arrow-${k}`, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse'},
      h('svg:path', {d: 'M0,0 L10,5 L0,10 z', class: `arrowhead edge-${k}`})));
  }
  svg.append(defs);
  const edgeLayer = h('svg:g', {class: 'edges', 'aria-hidden': 'true'});
  // Edges leaving one node start side by side, ordered by where they go,
  // so they do not cross right under it.
  const slot = new Map();
  const fan = new Map();
  for (const e of g.edges) (fan.get(e.from) || fan.set(e.from, []).get(e.from)).push(e);
  for (const list of fan.values()) {
    list.slice().sort((x, y) => g.nodes.get(x.to).x - g.nodes.get(y.to).x).forEach((e, i) => slot.set(e, [i, list.length]));
  }
  for (const e of g.edges) {
    const a = g.nodes.get(e.from);
    const b = g.nodes.get(e.to);
    const [k, n] = slot.get(e);
    let d;
    let lx;
    let ly;
    if (e.back || b.y <= a.y) {
      // Around the right side, from the source's right to the target's.
      const sx = a.x + W;
      const sy = a.y + H / 2;
      const tx = b.x + W;
      const ty = b.y + H / 2;
      const cx = Math.max(sx, tx) + 56;
      d = `M${sx},${sy} C${cx},${sy} ${cx},${ty} ${tx + 2},${ty}`;
      lx = cx - 8;
      ly = (sy + ty) / 2;
    } else {
      const sx = a.x + W / 2 + (n > 1 ? (k - (n - 1) / 2) * 22 : 0);
      const sy = a.y + H;
      const tx = b.x + W / 2;
      const ty = b.y - 2;
      const my = (sy + ty) / 2;
      d = `M${sx},${sy} C${sx},${my} ${tx},${my} ${tx},${ty}`;
      lx = (sx + tx) / 2;
      ly = my;
    }
    edgeLayer.append(h('svg:path', {d, class: `edge edge-${e.kind}`, 'marker-end': `url(#arrow-${e.kind})`}));
    if (e.label) edgeLayer.append(h('svg:text', {x: lx, y: ly, class: `edge-label edge-${e.kind}`, 'text-anchor': 'middle'}, e.label));
  }
  svg.append(edgeLayer);
  const nodeEls = new Map();
  for (const [id, p] of g.nodes) {
    const t = p.node.type || '';
    const el = h('svg:g', {
      class: `node type-${t}`, transform: `translate(${p.x},${p.y})`, tabindex: 0, role: 'button',
      'aria-label': `${id}, ${t}`, dataset: {node: id},
    },
    h('svg:rect', {width: W, height: H, rx: 7}),
    h('svg:text', {x: 10, y: 19, class: 'node-id'}, id.length > 20 ? `${id.slice(0, 19)}…` : id),
    h('svg:text', {x: 10, y: 36, class: 'node-type'}, t.replace(/_/g, ' ')));
    el.append(h('svg:title', {}, `${id} (${t})`));
    const choose = () => onSelect && onSelect(id);
    el.addEventListener('click', choose);
    el.addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); choose(); }
    });
    nodeEls.set(id, el);
    svg.append(el);
  }
  container.append(svg);
  let last = '';
  return {
    /** Highlights the node being executed, the ones visited, the ones waiting and the one a faulted run failed in. */
    mark(current, visited, waiting, failed = null) {
      const key = `${current}|${[...visited].join(',')}|${[...waiting].join(',')}|${failed}`;
      if (key === last) return;
      last = key;
      for (const [id, el] of nodeEls) {
        el.classList.toggle('visited', visited.has(id));
        el.classList.toggle('current', id === current);
        el.classList.toggle('waiting', waiting.has(id));
        el.classList.toggle('failed', id === failed);
        const t = el.dataset.node;
        const bits = [];
        if (id === current) bits.push('current');
        if (id === failed) bits.push('the run failed here');
        if (waiting.has(id)) bits.push('waiting on a reply');
        else if (visited.has(id)) bits.push('visited');
        el.setAttribute('aria-label', `${t}, ${(flow.nodes.find((n) => n.id === t) || {}).type || ''}${bits.length ? `, ${bits.join(', ')}` : ''}`);
      }
    },
  };
}
