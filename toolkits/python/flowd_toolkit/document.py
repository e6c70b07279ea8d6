"""Reading the ``flow tools`` document into declarations and types.

host-boundary.txt, "Toolkits": "A toolkit answers describe from the
declarations it was generated from, so its fingerprints are the
declarations' own. It generates from what flow tools lists, not from Flow
source." The document (what ``flow tools FLOW.json`` prints)::

    { "data": the data version,
      "programs": [{ "root", "diagnostics",
                     "tools": [{ "tool", "fingerprint", "signature",
                                 "generic", "params": [{"name", "type"}],
                                 "ok", "err" }],
                     "types": { identity: declaration } }] }

Every part is checked before anything is served: a missing or malformed
part is a :class:`DocumentError` naming where it is (a JSON Pointer), never
silently left out. Like the Rust toolkit (``toolkit/src/document.rs``),
generic Tools, ``Param`` terms, host types and constructor payloads other
than one positional part are refused, not ignored.
"""

from . import codec, jsontext, named
from .values import make_enum_class, make_record_class

DATA_MAJOR = "1"


class DocumentError(ValueError):
    def __init__(self, pointer, message):
        super().__init__(f"flow tools document {pointer or '/'}: {message}")
        self.pointer = pointer
        self.message = message


class Listed:
    """One Tool the document lists: its identity, parameters, success and
    error types, and the fingerprint and signature describe answers with."""

    def __init__(self, tool, fingerprint, signature, params, ok, err):
        self.tool = tool
        self.fingerprint = fingerprint
        self.signature = signature
        self.params = params
        self.ok = ok
        self.err = err
        self.args = named.RecordOf(params)

    def __repr__(self):
        return f"<declaration {self.tool} {self.fingerprint}>"


def _tok(s):
    return s.replace("~", "~0").replace("/", "~1")


def _obj(v, ptr):
    if not isinstance(v, dict):
        raise DocumentError(ptr, "expected an object")
    return v


def _arr(v, ptr):
    if not isinstance(v, list):
        raise DocumentError(ptr, "expected an array")
    return v


def _str(v, ptr):
    if not isinstance(v, str) or not v:
        raise DocumentError(ptr, "expected a non-empty string")
    return v


def _get(m, ptr, key):
    if key not in m:
        raise DocumentError(ptr, f"missing member `{key}`")
    return m[key]


def _doc(m, ptr):
    d = _get(m, ptr, "doc")
    if d is not None and not isinstance(d, str):
        raise DocumentError(ptr + "/doc", "expected a string or null")
    return d


def read(doc):
    """Every Tool of every program in a parsed document (a tree from
    :func:`flowd_toolkit.jsontext.parse`), by identity, and the declared
    types by identity. A Tool or type listed by two programs must be listed
    alike."""
    top = _obj(doc, "")
    data = _str(_get(top, "", "data"), "/data")
    if data.split(".")[0] != DATA_MAJOR:
        raise DocumentError("/data", f"data version {data} refused: this toolkit speaks 1.x")
    programs = _arr(_get(top, "", "programs"), "/programs")
    decls = {}
    bodies = []
    for i, p in enumerate(programs):
        ptr = f"/programs/{i}"
        p = _obj(p, ptr)
        tmap = _obj(_get(p, ptr, "types"), ptr + "/types")
        for key, d in tmap.items():
            dptr = f"{ptr}/types/{_tok(key)}"
            d = _obj(d, dptr)
            name = _str(_get(d, dptr, "name"), dptr + "/name")
            if key not in decls:
                decls[key] = named.Decl(key, name)
            bodies.append((key, dptr, d))
    seen_bodies = {}
    for key, dptr, d in bodies:
        body = _read_body(d, dptr, decls)
        canon = jsontext.canonical(_strip_doc(d))
        if key in seen_bodies:
            if seen_bodies[key] != canon:
                raise DocumentError(dptr, "listed twice with different bodies")
            continue
        seen_bodies[key] = canon
        decl = decls[key]
        decl.doc = _doc(d, dptr)
        decl.kind, members = body
        if decl.kind == "record":
            decl.fields = members
        else:
            decl.ctors = members
    for decl in decls.values():
        decl.cls = make_record_class(decl) if decl.kind == "record" else make_enum_class(decl)
    listed = {}
    for i, p in enumerate(programs):
        ptr = f"/programs/{i}"
        for j, t in enumerate(_arr(_get(p, ptr, "tools"), ptr + "/tools")):
            entry = _read_tool(t, f"{ptr}/tools/{j}", decls)
            prev = listed.get(entry.tool)
            if prev is not None and prev.fingerprint != entry.fingerprint:
                raise DocumentError(f"{ptr}/tools/{j}", "listed twice with different fingerprints")
            listed.setdefault(entry.tool, entry)
    return listed, decls


def _strip_doc(v):
    if isinstance(v, dict):
        return {k: _strip_doc(x) for k, x in v.items() if k != "doc"}
    if isinstance(v, list):
        return [_strip_doc(x) for x in v]
    return v


def _read_body(d, dptr, decls):
    _doc(d, dptr)
    args = _arr(_get(d, dptr, "args"), dptr + "/args")
    if args:
        raise DocumentError(dptr + "/args", "generic declarations are not supported by this toolkit")
    kind = _str(_get(d, dptr, "kind"), dptr + "/kind")
    if kind == "record":
        fptr = dptr + "/fields"
        return "record", _read_fields(_arr(_get(d, dptr, "fields"), fptr), fptr, decls)
    if kind == "enum":
        cptr = dptr + "/constructors"
        ctors = []
        names = set()
        for j, c in enumerate(_arr(_get(d, dptr, "constructors"), cptr)):
            p = f"{cptr}/{j}"
            c = _obj(c, p)
            name = _str(_get(c, p, "name"), p + "/name")
            if name in names:
                raise DocumentError(p, f"constructor `{name}` is repeated")
            names.add(name)
            payload = _get(c, p, "payload")
            if payload is None:
                ty = None
            elif (
                isinstance(payload, dict)
                and len(payload) == 1
                and isinstance(payload.get("positional"), list)
                and len(payload["positional"]) == 1
            ):
                ty = term(payload["positional"][0], p + "/payload/positional/0", decls)
            else:
                raise DocumentError(p + "/payload", "only a payload of one positional part is supported")
            ctors.append(named.Ctor(name, ty, _doc(c, p)))
        return "enum", ctors
    raise DocumentError(dptr + "/kind", f"kind `{kind}` is not supported (record or enum)")


def _read_fields(fields, ptr, decls):
    out = []
    names = set()
    for i, f in enumerate(fields):
        p = f"{ptr}/{i}"
        f = _obj(f, p)
        name = _get(f, p, "name")
        if not isinstance(name, str):
            raise DocumentError(p + "/name", "expected a string")
        if name in names:
            raise DocumentError(p, f"name `{name}` is repeated")
        names.add(name)
        ty = term(_get(f, p, "type"), p + "/type", decls)
        out.append(named.Field(name, ty, _doc(f, p) if "doc" in f else None))
    return out


def _read_tool(t, ptr, decls):
    t = _obj(t, ptr)
    tool = _str(_get(t, ptr, "tool"), ptr + "/tool")
    fp = _str(_get(t, ptr, "fingerprint"), ptr + "/fingerprint")
    if not fp.startswith("sha256:"):
        raise DocumentError(ptr + "/fingerprint", "expected sha256:<hex>")
    signature = _obj(_get(t, ptr, "signature"), ptr + "/signature")
    if _arr(_get(t, ptr, "generic"), ptr + "/generic"):
        raise DocumentError(ptr + "/generic", "generic Tools are not supported by this toolkit")
    pptr = ptr + "/params"
    params = _read_fields(_arr(_get(t, ptr, "params"), pptr), pptr, decls)
    ok = term(_get(t, ptr, "ok"), ptr + "/ok", decls)
    err = term(_get(t, ptr, "err"), ptr + "/err", decls)
    return Listed(tool, fp, signature, params, ok, err)


def term(t, ptr, decls, depth=0):
    """A type term: a primitive by name, ``{"List": t}``, ``{"Set": t}``,
    ``{"Option": t}``, ``{"Dict": [k, v]}``, ``{"Tuple": [t, ...]}`` or
    ``{"Named": identity}``."""
    if depth > jsontext.MAX_DEPTH:
        raise DocumentError(ptr, "term nested too deeply")
    if isinstance(t, str):
        if t in codec.PRIMITIVES:
            return codec.PRIMITIVES[t]
        raise DocumentError(ptr, f"unknown type `{t}`")
    if not isinstance(t, dict) or len(t) != 1:
        raise DocumentError(ptr, "expected a type term")
    (k, v), = t.items()
    p = f"{ptr}/{_tok(k)}"

    def sub(x, q):
        return term(x, q, decls, depth + 1)

    if k == "List":
        return codec.ListType(sub(v, p))
    if k == "Set":
        return codec.SetType(sub(v, p))
    if k == "Option":
        return codec.OptionType(sub(v, p))
    if k == "Dict" and isinstance(v, list) and len(v) == 2:
        return codec.DictType(sub(v[0], p + "/0"), sub(v[1], p + "/1"))
    if k == "Tuple" and isinstance(v, list) and len(v) >= 2:
        return codec.TupleType([sub(x, f"{p}/{i}") for i, x in enumerate(v)])
    if k == "Named" and isinstance(v, str):
        if v not in decls:
            raise DocumentError(p, f"`{v}` is not in the types map")
        return named.NamedType(decls[v])
    if k == "Param":
        raise DocumentError(p, "type parameters are not supported by this toolkit")
    raise DocumentError(ptr, f"malformed `{k}` term")
