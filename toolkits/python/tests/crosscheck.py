"""The Python side of abi/tests/python_toolkit.rs: reads one case per line
from stdin, answers one line per case on stdout.

A case is ``{"types": {...}, "type": term, "texts": [...], "seed": n}``.
The answer is ``{"results": [{"ok": canonical} | {"err": reason}, ...],
"generated": [{"text", "python"} | {"error", "python"}, ...]}``: every text
decoded at the type and written back, and values of the type built here
from Python objects in the many forms the encoder accepts, then encoded.
"""

import datetime as dt
import json
import random
import sys
from decimal import Decimal

from flowd_toolkit import DecodeError, Duration, Instant, Some
from flowd_toolkit import codec, named
from flowd_toolkit.document import read, term
from flowd_toolkit.temporal import _MAX_NANOS, _MIN_NANOS

CHARS = ['"', "\\", "/", "\n", "\r", "\t", "\b", "\f", "\0", "\x01", "\x1f", "\x7f", "\x80",
         "\u2028", "é", "\ue000", "\ufeff", "\uffff", "😀", "\U0010ffff", "a", "Z", " "]


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)

    def text(self):
        r = self.r
        return "".join(r.choice(CHARS) if r.random() < 0.5 else chr(r.randrange(0x20, 0x7F))
                       for _ in range(r.randrange(0, 10)))

    def int_(self):
        r = self.r
        k = r.randrange(4)
        if k == 0:
            return r.randrange(-20, 20)
        if k == 1:
            return r.randrange(-(1 << 63), 1 << 63)
        return r.choice((-1, 1)) * r.randrange(10 ** r.randrange(1, 300))

    def decimal(self):
        r = self.r
        k = r.randrange(5)
        if k == 0:
            return r.randrange(-1000, 1000)  # an int is an exact Decimal
        digits = tuple(r.randrange(10) for _ in range(r.randrange(1, 40)))
        # Trailing zeros and any exponent: the writer normalizes.
        return Decimal((r.randrange(2), digits + (0,) * r.randrange(3), r.randrange(-40, 40)))

    def instant(self):
        r = self.r
        if r.random() < 0.5:
            return Instant(r.randrange(_MIN_NANOS, _MAX_NANOS + 1))
        tz = dt.timezone(dt.timedelta(minutes=r.randrange(-23 * 60, 23 * 60)))
        base = dt.datetime(r.randrange(1, 9999), r.randrange(1, 13), r.randrange(1, 29),
                           r.randrange(24), r.randrange(60), r.randrange(60), r.randrange(1000000))
        try:
            return base.replace(tzinfo=tz)
        except ValueError:
            return Instant(0)

    def duration(self):
        r = self.r
        if r.random() < 0.5:
            return Duration(r.randrange(-10**27, 10**27 + 1))
        return dt.timedelta(microseconds=r.randrange(-10**15, 10**15))

    def json_value(self, depth=3):
        r = self.r
        k = r.randrange(8 if depth else 5)
        if k == 0:
            return None
        if k == 1:
            return r.random() < 0.5
        if k == 2:
            return self.int_()
        if k == 3:
            return self.decimal()
        if k == 4:
            return self.text()
        if k in (5, 6):
            return [self.json_value(depth - 1) for _ in range(r.randrange(4))]
        return {self.text(): self.json_value(depth - 1) for _ in range(r.randrange(4))}

    def distinct(self, t, n, depth):
        """Up to n values of t, distinct in Flow's sense."""
        out, seen = [], set()
        for _ in range(n):
            v = self.value(t, depth)
            key = t.encode(v)
            if key not in seen:
                seen.add(key)
                out.append(v)
        return out

    def value(self, t, depth=3):
        r = self.r
        c = type(t)
        if c is codec.UnitType:
            return None
        if c is codec.BoolType:
            return r.random() < 0.5
        if c is codec.IntType:
            return self.int_()
        if c is codec.DecimalType:
            return self.decimal()
        if c is codec.TextType:
            return self.text()
        if c is codec.BytesType:
            b = bytes(r.randrange(256) for _ in range(r.randrange(20)))
            return bytearray(b) if r.random() < 0.3 else b
        if c is codec.InstantType:
            return self.instant()
        if c is codec.DurationType:
            return self.duration()
        if c is codec.JsonType:
            return self.json_value()
        n = r.randrange(4) if depth > 0 else 0
        if c is codec.ListType:
            items = [self.value(t.item, depth) for _ in range(n)]
            return tuple(items) if r.random() < 0.2 else items
        if c is codec.SetType:
            items = self.distinct(t.item, n, depth)
            r.shuffle(items)
            if t.item.hashable() and r.random() < 0.7:
                return {as_decoded(t.item, x) for x in items}
            return items
        if c is codec.OptionType:
            if r.random() < 0.4:
                return None
            v = self.value(t.item, depth)
            return Some(v) if t.item.nullable or r.random() < 0.2 else v
        if c is codec.TupleType:
            parts = [self.value(x, depth) for x in t.items]
            return parts if r.random() < 0.2 else tuple(parts)
        if c is codec.DictType:
            keys = self.distinct(t.key_type, n, depth)
            pairs = [(k, self.value(t.value, depth)) for k in keys]
            if t.text_keys or (t.key_type.hashable() and r.random() < 0.7):
                return {as_decoded(t.key_type, k): v for k, v in pairs}
            return pairs
        if c is named.NamedType:
            d = t.decl
            # The recursive Tree bounds its depth.
            inner = depth - 1 if d.identity == "test.Tree" else depth
            if d.kind == "record":
                given = {}
                for f in d.fields:
                    if f.optional:
                        if inner <= 0 or r.random() < 0.4:
                            if r.random() < 0.5:
                                given[f.name] = None
                            continue
                        v = self.value(f.inner, inner)
                        given[f.name] = Some(v) if f.inner.nullable else v
                    else:
                        given[f.name] = self.value(f.type, inner)
                if r.random() < 0.5:
                    return given
                attrs = d.cls.__flow_fields__
                return d.cls(**{attrs[k]: v for k, v in given.items()})
            ctor = r.choice(d.ctors)
            if ctor.payload is None:
                return ctor.name if r.random() < 0.5 else d.cls(ctor.name)
            p = self.value(ctor.payload, inner)
            return {ctor.name: p} if r.random() < 0.5 else d.cls(ctor.name, p)
        raise TypeError(f"no generator for {t!r}")


def as_decoded(t, v):
    """The hashable form decoding gives (a record given as a dict becomes
    its dataclass)."""
    return t.decode_text(t.encode(v))


def safe(s):
    """A message as text Rust can read (a lone surrogate escaped)."""
    return s.encode("utf-8", "backslashreplace").decode("utf-8")


def answer(case):
    doc = {"data": "1.0", "programs": [{"root": "case", "diagnostics": [], "tools": [], "types": case["types"]}]}
    _, decls = read(doc)
    t = term(case["type"], "", decls)
    results = []
    for text in case["texts"]:
        try:
            results.append({"ok": t.encode(t.decode_text(text))})
        except DecodeError as e:
            results.append({"err": safe(str(e))})
    gen = Gen(case["seed"])
    generated = []
    for _ in range(3):
        v = gen.value(t)
        try:
            generated.append({"text": t.encode(v), "python": safe(repr(v)[:2000])})
        except DecodeError as e:
            generated.append({"error": safe(str(e)), "python": safe(repr(v)[:2000])})
    return {"results": results, "generated": generated}


def main():
    sys.setrecursionlimit(10000)
    for line in sys.stdin:
        out = answer(json.loads(line))
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
