// A reply form's fields in the order the flow's author wrote them. A
// Call's recorded `schema` is canonical JSON (its keys sorted, so the
// chain's bytes never depend on how a document was written); the node's
// `resume_schema` in the run's recorded source keeps the author's order.

import {api, apiText} from './api.js';

const programs = new Map(); // run → Promise<the entry module's document | null>

function program(run) {
  if (!programs.has(run)) {
    programs.set(run, (async () => {
      try {
        const view = await api(`/v1/runs/${run}`);
        const text = await apiText(`/v1/runs/${run}/sources/${encodeURIComponent(view.entry.module)}`);
        return JSON.parse(text);
      } catch {
        return null; // the recorded order is still a usable form
      }
    })());
  }
  return programs.get(run);
}

/** `schema` with its object keys in the order of `doc` (the same schema as written). */
export function inDocumentOrder(schema, doc) {
  if (!schema || typeof schema !== 'object' || !doc || typeof doc !== 'object') return schema;
  if (Array.isArray(schema)) return Array.isArray(doc) ? schema.map((v, i) => inDocumentOrder(v, doc[i])) : schema;
  const out = {};
  for (const k of Object.keys(doc)) if (k in schema) out[k] = inDocumentOrder(schema[k], doc[k]);
  for (const k of Object.keys(schema)) if (!(k in out)) out[k] = schema[k];
  return out;
}

/** The call's schema in the author's order, when its node is in the run's entry module. */
export async function authorOrder(c, doc) {
  const flow = doc || await program(c.run);
  const node = flow && Array.isArray(flow.nodes) ? flow.nodes.find((n) => n && n.id === c.node) : null;
  if (!node || !node.resume_schema || !c.schema) return c.schema;
  // The recorded schema names the node's declaration by reference:
  // {"$defs": {"<module>.nodes.<id>.resume": …}, "$ref": "#/$defs/…"}.
  const ref = typeof c.schema.$ref === 'string' && c.schema.$ref.startsWith('#/$defs/') ? c.schema.$ref.slice(8) : null;
  if (ref && c.schema.$defs && c.schema.$defs[ref]) {
    return {...c.schema, $defs: {...c.schema.$defs, [ref]: inDocumentOrder(c.schema.$defs[ref], node.resume_schema)}};
  }
  return inDocumentOrder(c.schema, node.resume_schema);
}
