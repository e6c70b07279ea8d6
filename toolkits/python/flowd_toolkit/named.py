"""Declared types: records and enums (nominal, by identity) and the record
of a Tool's parameters, with their codecs (see :mod:`flowd_toolkit.codec`
for the rules every type keeps)."""

from collections.abc import Mapping

from . import jsontext
from .codec import _NOTHING, OptionType, Type, _pyname, unwrap_some, wrap_some
from .jsontext import DecodeError
from .values import EnumValue


class Field:
    """A record field or Tool parameter. An Option field holding None is
    absent; one holding Some(v) holds v."""

    __slots__ = ("name", "type", "doc", "optional", "inner")

    def __init__(self, name, type_, doc=None):
        self.name = name
        self.type = type_
        self.doc = doc
        self.optional = isinstance(type_, OptionType)
        self.inner = type_.item if self.optional else type_


class Ctor:
    __slots__ = ("name", "payload", "doc")

    def __init__(self, name, payload, doc=None):
        self.name = name
        self.payload = payload
        self.doc = doc


class Decl:
    """A declared record or enum: identity, name, body and its Python
    class (made once the body is known)."""

    def __init__(self, identity, name, doc=None):
        self.identity = identity
        self.name = name
        self.doc = doc
        self.kind = None
        self.fields = []
        self.ctors = []
        self.cls = None
        self._hashable = None


class NamedType(Type):
    def __init__(self, decl):
        self.decl = decl

    def describe(self):
        return f"{self.decl.kind} {self.decl.name}"

    def hashable(self, seen=None):
        d = self.decl
        if d._hashable is not None:
            return d._hashable
        seen = set() if seen is None else seen
        if d.identity in seen:
            return True  # a cycle adds nothing unhashable by itself
        seen.add(d.identity)
        parts = [f.type for f in d.fields] + [c.payload for c in d.ctors if c.payload]
        result = all(t.hashable(seen) for t in parts)
        if len(seen) == 1:
            d._hashable = result
        seen.discard(d.identity)
        return result

    # Records.

    def _decode_record(self, v):
        if not isinstance(v, dict):
            raise self.mismatch(v)
        d = self.decl
        attrs = d.cls.__flow_fields__
        kwargs = {}
        for f in d.fields:
            if f.name in v:
                try:
                    inner = f.inner.decode(v[f.name])
                except DecodeError as e:
                    raise e.at(f.name) from None
                kwargs[attrs[f.name]] = wrap_some(f.inner, inner) if f.optional else inner
            elif not f.optional:
                raise DecodeError(f"missing required field {jsontext.write_str(f.name)} ({f.type.describe()})")
        # Extra fields were judged as JSON by the reader and are dropped.
        return d.cls(**kwargs)

    def _prepare_record(self, v):
        d = self.decl
        if type(v) is d.cls:
            given = {f.name: getattr(v, d.cls.__flow_fields__[f.name]) for f in d.fields}
        elif isinstance(v, Mapping):
            names = {f.name for f in d.fields}
            for k in v:
                if k not in names:
                    raise DecodeError(f"record {d.name} has no field {k!r}")
            given = dict(v)
        else:
            raise DecodeError(f"expected record {d.name}, found Python {_pyname(v)}")
        out = []
        for f in d.fields:
            x = given.get(f.name, _NOTHING)
            try:
                if f.optional:
                    present, inner = unwrap_some(f.inner, None if x is _NOTHING else x)
                    if present:
                        out.append((f.name, f.inner.prepare(inner)))
                elif x is _NOTHING:
                    raise DecodeError(f"missing required field {f.name!r} ({f.type.describe()})")
                else:
                    out.append((f.name, f.type.prepare(x)))
            except DecodeError as e:
                raise e.at(f.name) from None
        out.sort(key=lambda e: e[0])
        return tuple(out)

    def _field_type(self, name):
        for f in self.decl.fields:
            if f.name == name:
                return f.inner
        raise KeyError(name)

    # Enums.

    def _decode_enum(self, v):
        d = self.decl
        if isinstance(v, str):
            for c in d.ctors:
                if c.name == v:
                    if c.payload is not None:
                        raise DecodeError(
                            f"constructor {v!r} of enum {d.name} takes a payload: write {{{v!r}: …}}"
                        )
                    return d.cls(v)
            raise DecodeError(f"{v!r} is not a constructor of enum {d.name} (expected one of {self._names()})")
        if isinstance(v, dict):
            if len(v) != 1:
                raise DecodeError(
                    "an enum value with a payload is an object with exactly one key"
                    if v
                    else f"expected a constructor of enum {d.name}, found an empty object"
                )
            (name, p), = v.items()
            for c in d.ctors:
                if c.name == name:
                    if c.payload is None:
                        raise DecodeError(f"constructor {name!r} of enum {d.name} has no payload: write {name!r}")
                    try:
                        return d.cls(name, c.payload.decode(p))
                    except DecodeError as e:
                        raise e.at(name) from None
            raise DecodeError(f"{name!r} is not a constructor of enum {d.name} (expected one of {self._names()})")
        raise self.mismatch(v)

    def _names(self):
        return ", ".join(repr(c.name) for c in self.decl.ctors)

    def _prepare_enum(self, v):
        d = self.decl
        if type(v) is d.cls:
            tag, payload = v.tag, v.value
        elif isinstance(v, str):
            tag, payload = v, _NOTHING
        elif isinstance(v, Mapping) and len(v) == 1:
            (tag, payload), = v.items()
        elif isinstance(v, EnumValue):
            raise DecodeError(f"expected enum {d.name}, found enum {type(v).__name__}")
        else:
            raise DecodeError(f"expected enum {d.name}, found Python {_pyname(v)}")
        for i, c in enumerate(d.ctors):
            if c.name == tag:
                if c.payload is None:
                    if payload is not _NOTHING and not (type(v) is d.cls):
                        raise DecodeError(f"constructor {tag!r} of enum {d.name} has no payload")
                    return (i, tag, _NOTHING)
                if payload is _NOTHING:
                    raise DecodeError(f"constructor {tag!r} of enum {d.name} takes a payload")
                try:
                    return (i, tag, c.payload.prepare(payload))
                except DecodeError as e:
                    raise e.at(tag) from None
        raise DecodeError(f"{tag!r} is not a constructor of enum {d.name} (expected one of {self._names()})")

    def _payload_type(self, index):
        return self.decl.ctors[index].payload

    # Dispatch.

    def decode(self, v):
        if self.decl.kind == "record":
            return self._decode_record(v)
        return self._decode_enum(v)

    def prepare(self, v):
        if self.decl.kind == "record":
            return self._prepare_record(v)
        return self._prepare_enum(v)

    def write(self, n, out):
        if self.decl.kind == "record":
            out.append("{")
            for i, (name, x) in enumerate(n):
                if i:
                    out.append(",")
                out.append(jsontext.write_str(name))
                out.append(":")
                self._field_type(name).write(x, out)
            out.append("}")
            return
        index, tag, payload = n
        if payload is _NOTHING:
            out.append(jsontext.write_str(tag))
        else:
            out.append("{" + jsontext.write_str(tag) + ":")
            self._payload_type(index).write(payload, out)
            out.append("}")

    def key(self, n):
        if self.decl.kind == "record":
            return tuple((name, self._field_type(name).key(x)) for name, x in n)
        index, tag, payload = n
        if payload is _NOTHING:
            return (index, tag)
        return (index, tag, self._payload_type(index).key(payload))


class RecordOf(Type):
    """The record of a Tool's parameters (``args``): decoded into keyword
    arguments by the record-field rule."""

    def __init__(self, fields):
        self.fields = fields

    def describe(self):
        return "args"

    def decode(self, v):
        if not isinstance(v, dict):
            raise DecodeError(f"args are an object, found {found(v)}")
        out = {}
        for f in self.fields:
            if f.name in v:
                try:
                    inner = f.inner.decode(v[f.name])
                except DecodeError as e:
                    raise e.at(f.name) from None
                out[f.name] = wrap_some(f.inner, inner) if f.optional else inner
            elif f.optional:
                out[f.name] = None
            else:
                raise DecodeError(f"missing required field {jsontext.write_str(f.name)} ({f.type.describe()})")
        return out
