// A form generated from a JSON Schema: strings, numbers and integers,
// enums (also `oneOf` of `const`s) as selects, booleans, nested objects,
// arrays, `$ref`s into `$defs`. It validates what it can in the page and
// shows the server's refusal (problem+json) at the field its detail names
// (`$.field: …`). "Edit as JSON" sends any JSON instead; the server is the
// judge of that.

import {h, pretty} from './ui.js';

let uid = 0;

/** Follows `$ref`s (local `#/$defs/…` and `#/definitions/…`). */
function resolve(root, s, depth = 0) {
  if (!s || typeof s !== 'object' || depth > 20) return s || {};
  if (typeof s.$ref === 'string' && s.$ref.startsWith('#/')) {
    let t = root;
    for (const p of s.$ref.slice(2).split('/')) t = t && t[p.replace(/~1/g, '/').replace(/~0/g, '~')];
    const {$ref, ...rest} = s;
    return resolve(root, {...(t || {}), ...rest}, depth + 1);
  }
  return s;
}

/** The values of an enum: `enum`, or `oneOf`/`anyOf` of `const`s. */
function enumOf(s) {
  if (Array.isArray(s.enum)) return s.enum;
  for (const k of ['oneOf', 'anyOf']) {
    if (Array.isArray(s[k]) && s[k].length && s[k].every((x) => x && 'const' in x)) return s[k].map((x) => x.const);
  }
  if ('const' in s) return [s.const];
  return null;
}

/** The main type and whether null is allowed. */
function typeOf(root, s) {
  let t = s.type;
  let nullable = false;
  if (Array.isArray(t)) {
    nullable = t.includes('null');
    t = t.find((x) => x !== 'null');
  }
  if (!t) {
    for (const k of ['anyOf', 'oneOf']) {
      if (Array.isArray(s[k]) && s[k].length === 2 && s[k].some((x) => resolve(root, x).type === 'null')) {
        const other = s[k].map((x) => resolve(root, x)).find((x) => x.type !== 'null');
        return {...typeOf(root, other), nullable: true, schema: other};
      }
    }
    if (s.properties) t = 'object';
    else if (s.items) t = 'array';
  }
  return {type: t || 'any', nullable, schema: s};
}

const isNum = (v) => typeof v === 'number' && Number.isFinite(v);

/**
 * Builds a form for `schema`, filled with `value`. `fields` (optional)
 * limits a root object to those properties. Returns {el, value(), submit()}.
 */
export function schemaForm(rootSchema, {value, fields, label = 'Reply', idPrefix} = {}) {
  const root = rootSchema || {};
  const prefix = idPrefix || `f${++uid}`;
  const registry = new Map(); // path → {control, err}
  const formErr = h('p', {class: 'form-err', role: 'alert', hidden: true});

  function errSlot(id) {
    return h('p', {class: 'field-err', id: `${id}-err`, hidden: true});
  }

  function idFor(path) {
    return `${prefix}-${path.replace(/[^A-Za-z0-9_-]+/g, '_')}`;
  }

  // Each builder returns {el, get(): value | undefined, check(errors)}.
  function build(schema, path, name, required, initial) {
    const s0 = resolve(root, schema);
    const en = enumOf(s0);
    const {type, nullable, schema: s} = typeOf(root, s0);
    const id = idFor(path);
    const desc = s.description || s0.description;
    const title = s.title || s0.title || name;
    const labelText = [title, required ? ' (required)' : ''];
    const hint = desc ? h('p', {class: 'hint', id: `${id}-hint`}, desc) : null;
    const err = errSlot(id);
    const describedBy = [desc ? `${id}-hint` : '', `${id}-err`].filter(Boolean).join(' ');

    if (en) {
      const sel = h('select', {id, 'aria-describedby': describedBy, 'aria-required': required ? 'true' : null},
        h('option', {value: ''}, required ? '— choose —' : '— none —'),
        en.map((v, i) => h('option', {value: String(i)}, typeof v === 'string' ? v : JSON.stringify(v))));
      const at = en.findIndex((v) => JSON.stringify(v) === JSON.stringify(initial));
      if (at >= 0) sel.value = String(at);
      registry.set(path, {control: sel, err});
      return {
        el: h('div', {class: 'field'}, h('label', {for: id}, labelText), hint, sel, err),
        get: () => (sel.value === '' ? undefined : en[Number(sel.value)]),
        check(errors) {
          if (sel.value === '' && required) errors.push({path, message: 'choose one'});
        },
      };
    }
    if (type === 'object') {
      const props = s.properties || {};
      const req = new Set(s.required || []);
      const names = Object.keys(props).filter((k) => !fields || path !== '$' || fields.includes(k));
      const init = initial && typeof initial === 'object' && !Array.isArray(initial) ? initial : {};
      const kids = names.map((k) => [k, build(props[k], `${path}.${k}`, k, req.has(k), init[k])]);
      const extraOk = s.additionalProperties !== false && !names.length;
      if (extraOk) {
        // A free-form object: edit it as JSON.
        // Absent and optional stays absent: the form sends only what the
        // user set (an untouched `{}` would be sent as a value).
        return jsonField(path, id, labelText, hint, err, describedBy, required, initial === undefined && required ? {} : initial, 'object');
      }
      registry.set(path, {control: null, err});
      const body = kids.map(([, k]) => k.el);
      const el = path === '$'
        ? h('div', {class: 'fields'}, body, err)
        : h('fieldset', {class: 'fields nested'}, h('legend', {}, labelText), hint, body, err);
      return {
        el,
        get() {
          const out = {};
          let any = false;
          for (const [k, f] of kids) {
            const v = f.get();
            if (v !== undefined) { out[k] = v; any = true; }
          }
          return any || required || path === '$' ? out : undefined;
        },
        check(errors) {
          const v = this.get();
          for (const [k, f] of kids) {
            if (v === undefined && !required) continue;
            f.check(errors);
            if (req.has(k) && f.get() === undefined && !errors.some((e) => e.path === `${path}.${k}`)) {
              errors.push({path: `${path}.${k}`, message: 'required'});
            }
          }
        },
      };
    }
    if (type === 'array') {
      const itemSchema = s.items || {};
      const box = h('div', {class: 'items'});
      const items = [];
      const add = (v) => {
        const i = items.length;
        const f = build(itemSchema, `${path}[${i}]`, `${title} ${i + 1}`, true, v);
        const wrap = h('div', {class: 'item'}, f.el,
          h('button', {type: 'button', class: 'btn-quiet', onclick: () => { items.splice(items.indexOf(entry), 1); wrap.remove(); }}, `Remove ${title} ${i + 1}`));
        const entry = {f, wrap};
        items.push(entry);
        box.append(wrap);
      };
      for (const v of Array.isArray(initial) ? initial : []) add(v);
      registry.set(path, {control: null, err});
      return {
        el: h('fieldset', {class: 'fields nested'}, h('legend', {}, labelText), hint, box,
          h('button', {type: 'button', class: 'btn-quiet', onclick: () => add(undefined)}, `Add ${title}`), err),
        get: () => (items.length || required ? items.map((e) => e.f.get()) : undefined),
        check(errors) {
          items.forEach((e) => e.f.check(errors));
          if (isNum(s.minItems) && items.length < s.minItems) errors.push({path, message: `at least ${s.minItems} items`});
          if (isNum(s.maxItems) && items.length > s.maxItems) errors.push({path, message: `at most ${s.maxItems} items`});
        },
      };
    }
    if (type === 'boolean') {
      const box = h('input', {id, type: 'checkbox', 'aria-describedby': describedBy});
      box.checked = initial === true;
      // An optional box nobody ticked or cleared sends nothing.
      let touched = false;
      box.addEventListener('change', () => { touched = true; });
      registry.set(path, {control: box, err});
      return {
        el: h('div', {class: 'field field-check'}, box, h('label', {for: id}, labelText), hint, err),
        get: () => (touched || required || initial !== undefined ? box.checked : undefined),
        check() {},
      };
    }
    if (type === 'number' || type === 'integer') {
      const inp = h('input', {
        id, type: 'number', step: type === 'integer' ? '1' : 'any', inputmode: type === 'integer' ? 'numeric' : 'decimal',
        'aria-describedby': describedBy, 'aria-required': required ? 'true' : null,
        min: isNum(s.minimum) ? s.minimum : null, max: isNum(s.maximum) ? s.maximum : null,
      });
      if (isNum(initial)) inp.value = String(initial);
      registry.set(path, {control: inp, err});
      return {
        el: h('div', {class: 'field'}, h('label', {for: id}, labelText), hint, inp, err),
        get: () => (inp.value.trim() === '' ? (nullable && required ? null : undefined) : Number(inp.value)),
        check(errors) {
          const raw = inp.value.trim();
          if (raw === '') {
            if (required && !nullable) errors.push({path, message: 'required'});
            return;
          }
          const v = Number(raw);
          if (!Number.isFinite(v)) errors.push({path, message: 'not a number'});
          else if (type === 'integer' && !Number.isInteger(v)) errors.push({path, message: 'must be a whole number'});
          else if (isNum(s.minimum) && v < s.minimum) errors.push({path, message: `at least ${s.minimum}`});
          else if (isNum(s.maximum) && v > s.maximum) errors.push({path, message: `at most ${s.maximum}`});
        },
      };
    }
    if (type === 'string') {
      const long = (typeof initial === 'string' && (initial.includes('\n') || initial.length > 60)) || (isNum(s.maxLength) && s.maxLength > 200);
      const attrs = {id, 'aria-describedby': describedBy, 'aria-required': required ? 'true' : null, spellcheck: 'true'};
      const inp = long ? h('textarea', {...attrs, rows: 4}) : h('input', {...attrs, type: 'text'});
      if (typeof initial === 'string') inp.value = initial;
      registry.set(path, {control: inp, err});
      return {
        el: h('div', {class: 'field'}, h('label', {for: id}, labelText), hint, inp, err),
        get: () => (inp.value === '' ? (nullable && required ? null : undefined) : inp.value),
        check(errors) {
          const v = inp.value;
          if (v === '') {
            if (required && !nullable) errors.push({path, message: 'required'});
            return;
          }
          const n = [...v].length;
          if (isNum(s.minLength) && n < s.minLength) errors.push({path, message: `at least ${s.minLength} characters`});
          else if (isNum(s.maxLength) && n > s.maxLength) errors.push({path, message: `at most ${s.maxLength} characters`});
          else if (typeof s.pattern === 'string') {
            try {
              if (!new RegExp(s.pattern, 'u').test(v)) errors.push({path, message: `must match ${s.pattern}`});
            } catch { /* a pattern JS cannot read: the server checks it */ }
          }
        },
      };
    }
    return jsonField(path, id, labelText, hint, err, describedBy, required, initial, 'any');
  }

  function jsonField(path, id, labelText, hint, err, describedBy, required, initial, what) {
    const ta = h('textarea', {id, rows: 3, class: 'mono', spellcheck: 'false', 'aria-describedby': describedBy, placeholder: what === 'object' ? '{}' : null});
    if (initial !== undefined) ta.value = pretty(initial);
    registry.set(path, {control: ta, err});
    return {
      el: h('div', {class: 'field'}, h('label', {for: id}, labelText, ' (JSON)'), hint, ta, err),
      get() {
        if (ta.value.trim() === '') return undefined;
        try { return JSON.parse(ta.value); } catch { return undefined; }
      },
      check(errors) {
        if (ta.value.trim() === '') {
          if (required) errors.push({path, message: 'required'});
          return;
        }
        try {
          const v = JSON.parse(ta.value);
          if (what === 'object' && (!v || typeof v !== 'object' || Array.isArray(v))) errors.push({path, message: 'must be a JSON object'});
        } catch (e) {
          errors.push({path, message: `not JSON: ${e.message}`});
        }
      },
    };
  }

  const top = build(root, '$', label, true, value);
  // A field's message is about what was there when it was checked: it
  // goes as the user edits that field (items added later included).
  function stale(e) {
    for (const {control, err} of registry.values()) {
      if (control !== e.target) continue;
      err.hidden = true;
      err.textContent = '';
      control.removeAttribute('aria-invalid');
    }
  }
  const jsonId = `${prefix}-json`;
  const jsonText = h('textarea', {id: jsonId, rows: 6, class: 'mono', spellcheck: 'false'});
  const summary = h('summary', {}, 'Edit as JSON');
  const details = h('details', {class: 'as-json'},
    summary,
    h('label', {for: jsonId}, `${label} as JSON (sent as written; the server checks it)`),
    jsonText);
  // Filled as it opens, in the click itself: the `toggle` event comes
  // later and would overwrite what was typed meanwhile.
  summary.addEventListener('click', () => {
    if (!details.open) jsonText.value = pretty(top.get() === undefined ? {} : top.get());
  });

  function clear() {
    formErr.hidden = true;
    formErr.textContent = '';
    for (const {control, err} of registry.values()) {
      err.hidden = true;
      err.textContent = '';
      if (control) control.removeAttribute('aria-invalid');
    }
  }

  function show(errors) {
    clear();
    let focus = null;
    for (const e of errors) {
      const slot = registry.get(e.path);
      if (!slot || e.path === '$') {
        formErr.textContent = e.message;
        formErr.hidden = false;
        continue;
      }
      slot.err.textContent = e.message;
      slot.err.hidden = false;
      if (slot.control) {
        slot.control.setAttribute('aria-invalid', 'true');
        focus = focus || slot.control;
      }
    }
    if (focus) focus.focus();
  }

  return {
    el: h('div', {class: 'schema-form', oninput: stale, onchange: stale}, formErr, top.el, details),
    /** The value to send: {ok, value} or {ok: false} with errors shown. */
    submit() {
      clear();
      if (details.open) {
        try {
          return {ok: true, value: JSON.parse(jsonText.value)};
        } catch (e) {
          show([{path: '$', message: `The JSON does not parse: ${e.message}`}]);
          return {ok: false};
        }
      }
      const errors = [];
      top.check(errors);
      if (errors.length) {
        show(errors);
        return {ok: false};
      }
      return {ok: true, value: top.get()};
    },
    /** The current value without checks. */
    value: () => top.get(),
    /**
     * Shows a server refusal at the field it names (`$.a.b: …` in the
     * detail); true when a field was found, else it is shown for the form.
     */
    serverError(detail) {
      const m = /(\$(?:\.[A-Za-z_][A-Za-z0-9_-]*|\[\d+\])*)\s*:\s*([\s\S]*)$/.exec(detail || '');
      const path = m ? m[1] : '$';
      const found = registry.has(path) && path !== '$';
      show([{path: found ? path : '$', message: found ? `Refused by the server: ${m[2]}` : `Refused by the server: ${detail}`}]);
      if (found && details.open) details.open = false;
      return found;
    },
    clear,
  };
}

/** A FlowSpec shorthand (`{name: schema, …}`) as an object schema. */
export function objectSchema(props, required = []) {
  if (!props) return {type: 'object', properties: {}};
  if (props.type === 'object' || props.properties) return props;
  return {type: 'object', properties: props, required: required.filter((k) => k in props)};
}
