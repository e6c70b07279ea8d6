"""Flow types and their codecs: strict type-directed decoding and the
canonical writer, byte-identical to flow-abi's.

host-boundary.txt, "Decoding": "Decoding never coerces between types,
guesses a constructor, fills a default, or repairs a value." Each type
decodes a tree read by :func:`flowd_toolkit.jsontext.parse` into the Python
value an author sees, and encodes a Python value into canonical text.

How values look in Python:

========================  ====================================================
Flow                      Python
========================  ====================================================
Unit                      ``None``
Bool                      ``bool``
Int                       ``int`` (never ``bool``)
Decimal                   ``decimal.Decimal`` (an ``int`` is accepted when
                          encoding); never ``float``
Text                      ``str``
Bytes                     ``bytes``
Instant / Duration        :class:`~flowd_toolkit.Instant` /
                          :class:`~flowd_toolkit.Duration` (an aware
                          ``datetime`` / a ``timedelta`` is accepted)
json.Value                ``None``, ``bool``, ``int``, ``Decimal``, ``str``,
                          ``list``, ``dict``
List<T> / Tuple<...>      ``list`` / ``tuple``
Set<T>                    ``frozenset`` when T's values are hashable, else a
                          ``tuple`` in canonical order
Dict<Text, V>             ``dict``
Dict<K, V>                ``dict`` when K's values are hashable, else a
                          ``tuple`` of ``(k, v)`` pairs in canonical order
Option<T>                 ``None`` or the value; :class:`Some` (v) when T's
                          own values include ``None``
record                    its generated frozen dataclass (a ``dict`` keyed by
                          field name is accepted when encoding)
enum                      its generated :class:`EnumValue` class (a
                          constructor name, or a one-key ``dict`` for a
                          payload, is accepted when encoding)
========================  ====================================================

Encoding goes through a normalized form (``prepare``), which also gives
the order sets and dict keys are written in: flow-abi's value order
(numbers by value, texts by code point, bytes lexicographically, instants in
time, sequences lexicographically, records field by field in name order,
enums by constructor index then payload, json.Value by canonical text).
"""

import base64
import binascii
import datetime as _dt
from collections.abc import Mapping
from decimal import Decimal

from . import jsontext
from .jsontext import DecodeError, Num
from .temporal import Duration, Instant
from .values import Some

_NOTHING = object()


def found(v):
    """What a tree node is, for an error message."""
    if v is None:
        return "null"
    if v is True or v is False:
        return f"boolean {'true' if v else 'false'}"
    if isinstance(v, Num):
        return f"number {v.canonical()}"
    if isinstance(v, str):
        shown = v if len(v) <= 40 else v[:40] + "…"
        return f"string {jsontext.write_str(shown)}"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__


def _pyname(v):
    return "None" if v is None else type(v).__name__


class Type:
    """A Flow data type. Subclasses decode trees, prepare Python values
    (validated, normalized) and write prepared values canonically."""

    nullable = False

    def describe(self):
        raise NotImplementedError

    def hashable(self, seen=None):
        return True

    def decode(self, v):
        """A parsed tree node to the Python value."""
        raise NotImplementedError

    def prepare(self, v):
        """A Python value to the normalized form (refusing what is not of
        this type)."""
        raise NotImplementedError

    def write(self, n, out):
        """Appends the canonical text of a prepared value."""
        raise NotImplementedError

    def key(self, n):
        """The order key of a prepared value."""
        return n

    def mismatch(self, v):
        return DecodeError(f"expected {self.describe()}, found {found(v)}")

    def refuse(self, v):
        return DecodeError(f"expected {self.describe()}, found Python {_pyname(v)}")

    # The public entry points.

    def decode_text(self, text):
        """Decodes one JSON text strictly."""
        return self.decode(jsontext.parse(text))

    def encode(self, value):
        """The canonical text of ``value``."""
        out = []
        self.write(self.prepare(value), out)
        return "".join(out)

    def __repr__(self):
        return f"<type {self.describe()}>"


class _Prim(Type):
    def __init__(self, name):
        self.name = name

    def describe(self):
        return self.name


class UnitType(_Prim):
    nullable = True

    def decode(self, v):
        if v is None:
            return None
        raise self.mismatch(v)

    def prepare(self, v):
        if v is None:
            return None
        raise self.refuse(v)

    def write(self, n, out):
        out.append("null")

    def key(self, n):
        return 0


class BoolType(_Prim):
    def decode(self, v):
        if v is True or v is False:
            return v
        raise self.mismatch(v)

    def prepare(self, v):
        if v is True or v is False:
            return v
        raise self.refuse(v)

    def write(self, n, out):
        out.append("true" if n else "false")


class IntType(_Prim):
    def decode(self, v):
        if not isinstance(v, Num):
            raise self.mismatch(v)
        v.check_int()
        return v.to_int()

    def prepare(self, v):
        if not isinstance(v, int) or isinstance(v, bool):
            raise self.refuse(v)
        # 10^1000 has 3,322 bits: larger is past the limit, judged before
        # any text is made.
        if v.bit_length() > 3330 or len(str(abs(v))) > jsontext.MAX_INT_DIGITS:
            raise DecodeError(f"integer past the limit of {jsontext.MAX_INT_DIGITS} decimal digits")
        return v

    def write(self, n, out):
        out.append(str(n))


class DecimalType(_Prim):
    def decode(self, v):
        if not isinstance(v, Num):
            raise self.mismatch(v)
        v.check_decimal()
        return v.to_decimal()

    def prepare(self, v):
        if isinstance(v, Decimal):
            if not v.is_finite():
                raise DecodeError(f"{v} is not a Decimal")
            Num.of_decimal(v).check_decimal()
            return v
        if isinstance(v, int) and not isinstance(v, bool):
            IntType("Int").prepare(v)
            return Decimal(v)
        if isinstance(v, float):
            raise DecodeError(f"float {v!r} is not exact: a Decimal is a decimal.Decimal")
        raise self.refuse(v)

    def write(self, n, out):
        out.append(Num.of_decimal(n).canonical())


class TextType(_Prim):
    def decode(self, v):
        if isinstance(v, str):
            return v
        raise self.mismatch(v)

    def prepare(self, v):
        if not isinstance(v, str):
            raise self.refuse(v)
        jsontext.check_text(v)
        return v

    def write(self, n, out):
        out.append(jsontext.write_str(n))


class BytesType(_Prim):
    def decode(self, v):
        if not isinstance(v, str):
            raise self.mismatch(v)
        # Standard alphabet with padding, strictly: the text must be the
        # one canonical base64 of its bytes (no whitespace, no URL-safe
        # letters, no non-zero trailing bits).
        try:
            b = base64.b64decode(v.encode("ascii"), validate=True)
        except (UnicodeEncodeError, binascii.Error, ValueError):
            b = None
        if b is None or base64.b64encode(b).decode("ascii") != v:
            raise DecodeError(
                "expected Bytes as padded standard base64, found a string that is not"
            )
        return b

    def prepare(self, v):
        if isinstance(v, (bytes, bytearray, memoryview)):
            return bytes(v)
        raise self.refuse(v)

    def write(self, n, out):
        out.append('"' + base64.b64encode(n).decode("ascii") + '"')


class InstantType(_Prim):
    def decode(self, v):
        if not isinstance(v, str):
            raise self.mismatch(v)
        try:
            return Instant.parse(v)
        except ValueError as e:
            raise DecodeError(f"expected Instant, found {e}") from None

    def prepare(self, v):
        if isinstance(v, Instant):
            return v
        if isinstance(v, _dt.datetime):
            try:
                return Instant.from_datetime(v)
            except ValueError as e:
                raise DecodeError(str(e)) from None
        raise self.refuse(v)

    def write(self, n, out):
        out.append('"' + str(n) + '"')

    def key(self, n):
        return n.nanos


class DurationType(_Prim):
    def decode(self, v):
        if not isinstance(v, str):
            raise self.mismatch(v)
        try:
            return Duration.parse(v)
        except ValueError as e:
            raise DecodeError(f"expected Duration, found {e}") from None

    def prepare(self, v):
        if isinstance(v, Duration):
            return v
        if isinstance(v, _dt.timedelta):
            try:
                return Duration.from_timedelta(v)
            except ValueError as e:
                raise DecodeError(str(e)) from None
        raise self.refuse(v)

    def write(self, n, out):
        out.append('"' + str(n) + '"')

    def key(self, n):
        return n.nanos


class NeverType(_Prim):
    def decode(self, v):
        raise DecodeError(f"no value has type Never, found {found(v)}")

    def prepare(self, v):
        raise DecodeError("no value has type Never")


class JsonType(_Prim):
    """``json.Value``: prepared as its canonical text, which is also its
    order key."""

    nullable = True

    def hashable(self, seen=None):
        return False

    def decode(self, v):
        return jsontext.to_python(v)

    def prepare(self, v):
        return jsontext.canonical(v)

    def write(self, n, out):
        out.append(n)


UNIT = UnitType("Unit")
BOOL = BoolType("Bool")
INT = IntType("Int")
DECIMAL = DecimalType("Decimal")
TEXT = TextType("Text")
BYTES = BytesType("Bytes")
INSTANT = InstantType("Instant")
DURATION = DurationType("Duration")
NEVER = NeverType("Never")
JSON = JsonType("json.Value")
PRIMITIVES = {
    t.name: t for t in (UNIT, BOOL, INT, DECIMAL, TEXT, BYTES, INSTANT, DURATION, NEVER, JSON)
}


def _items(v, what):
    if isinstance(v, (list, tuple)):
        return v
    raise DecodeError(f"expected {what} (a list or tuple), found Python {_pyname(v)}")


def _each(items, f):
    out = []
    for i, x in enumerate(items):
        try:
            out.append(f(x))
        except DecodeError as e:
            raise e.at(i) from None
    return out


def _write_seq(t, ns, out):
    out.append("[")
    for i, n in enumerate(ns):
        if i:
            out.append(",")
        t.write(n, out)
    out.append("]")


class ListType(Type):
    def __init__(self, item):
        self.item = item

    def describe(self):
        return f"List<{self.item.describe()}>"

    def hashable(self, seen=None):
        return False

    def decode(self, v):
        if not isinstance(v, list):
            raise self.mismatch(v)
        return _each(v, self.item.decode)

    def prepare(self, v):
        return tuple(_each(_items(v, self.describe()), self.item.prepare))

    def write(self, n, out):
        _write_seq(self.item, n, out)

    def key(self, n):
        return tuple(self.item.key(x) for x in n)


class SetType(Type):
    def __init__(self, item):
        self.item = item

    def describe(self):
        return f"Set<{self.item.describe()}>"

    def hashable(self, seen=None):
        return self.item.hashable(seen)

    def _sorted(self, prepared):
        keyed = sorted(
            ((self.item.key(n), i, n) for i, n in enumerate(prepared)), key=lambda k: k[0]
        )
        for a, b in zip(keyed, keyed[1:]):
            if a[0] == b[0]:
                raise DecodeError(
                    f"duplicate element in a set (also at index {min(a[1], b[1])})"
                ).at(max(a[1], b[1]))
        return keyed

    def decode(self, v):
        if not isinstance(v, list):
            raise self.mismatch(v)
        values = _each(v, self.item.decode)
        keyed = self._sorted(_each(values, self.item.prepare))
        ordered = [values[i] for _, i, _ in keyed]
        return frozenset(ordered) if self.item.hashable() else tuple(ordered)

    def prepare(self, v):
        if isinstance(v, (set, frozenset)):
            v = list(v)
        keyed = self._sorted(_each(_items(v, self.describe()), self.item.prepare))
        return tuple(n for _, _, n in keyed)

    def write(self, n, out):
        _write_seq(self.item, n, out)

    def key(self, n):
        return tuple(self.item.key(x) for x in n)


class OptionType(Type):
    """An Option outside a record field: ``"None"`` or ``{"Some": v}``."""

    nullable = True

    def __init__(self, item):
        self.item = item

    def describe(self):
        return f"Option<{self.item.describe()}>"

    def hashable(self, seen=None):
        return self.item.hashable(seen)

    def decode(self, v):
        if v == "None":
            return None
        if isinstance(v, dict) and len(v) == 1 and "Some" in v:
            try:
                inner = self.item.decode(v["Some"])
            except DecodeError as e:
                raise e.at("Some") from None
            return wrap_some(self.item, inner)
        if isinstance(v, (str, dict)):
            raise DecodeError(
                f'expected {self.describe()}: an Option is "None" or an object with the one key "Some"'
            )
        raise self.mismatch(v)

    def prepare(self, v):
        present, inner = unwrap_some(self.item, v)
        return (self.item.prepare(inner),) if present else None

    def write(self, n, out):
        if n is None:
            out.append('"None"')
        else:
            out.append('{"Some":')
            self.item.write(n[0], out)
            out.append("}")

    def key(self, n):
        return (0,) if n is None else (1, self.item.key(n[0]))


def wrap_some(item, inner):
    """Some(inner) as the author sees it."""
    return Some(inner) if item.nullable else inner


def unwrap_some(item, v):
    """(present, inner) of an Option value given by the author."""
    if v is None:
        return False, None
    if isinstance(v, Some):
        return True, v.value
    if item.nullable:
        raise DecodeError(
            f"an Option<{item.describe()}> is None or Some(v), since None is also a value of {item.describe()}"
        )
    return True, v


class TupleType(Type):
    def __init__(self, items):
        self.items = items

    def describe(self):
        return "(" + ", ".join(t.describe() for t in self.items) + ")"

    def hashable(self, seen=None):
        return all(t.hashable(seen) for t in self.items)

    def _parts(self, v, f):
        if len(v) != len(self.items):
            raise DecodeError(f"expected a tuple of {len(self.items)} parts, found {len(v)}")
        out = []
        for i, (t, x) in enumerate(zip(self.items, v)):
            try:
                out.append(f(t, x))
            except DecodeError as e:
                raise e.at(i) from None
        return tuple(out)

    def decode(self, v):
        if not isinstance(v, list):
            raise self.mismatch(v)
        return self._parts(v, lambda t, x: t.decode(x))

    def prepare(self, v):
        return self._parts(_items(v, self.describe()), lambda t, x: t.prepare(x))

    def write(self, n, out):
        out.append("[")
        for i, (t, x) in enumerate(zip(self.items, n)):
            if i:
                out.append(",")
            t.write(x, out)
        out.append("]")

    def key(self, n):
        return tuple(t.key(x) for t, x in zip(self.items, n))


class DictType(Type):
    """``Dict<Text, V>`` is a JSON object; any other dict an array of
    ``[k, v]`` pairs sorted by key, keys unique."""

    def __init__(self, key_type, value):
        self.key_type = key_type
        self.value = value
        self.text_keys = key_type is TEXT

    def describe(self):
        return f"Dict<{self.key_type.describe()}, {self.value.describe()}>"

    def hashable(self, seen=None):
        return False

    def decode(self, v):
        if self.text_keys:
            if not isinstance(v, dict):
                raise self.mismatch(v)
            out = {}
            for k, x in v.items():
                try:
                    out[k] = self.value.decode(x)
                except DecodeError as e:
                    raise e.at(k) from None
            return out
        if not isinstance(v, list):
            raise self.mismatch(v)
        pairs = []
        for i, p in enumerate(v):
            try:
                if not isinstance(p, list) or len(p) != 2:
                    raise DecodeError(
                        f"expected a [key, value] pair, found {found(p) if not isinstance(p, list) else 'an array of ' + str(len(p))}"
                    )
                try:
                    k = self.key_type.decode(p[0])
                except DecodeError as e:
                    raise e.at(0) from None
                try:
                    x = self.value.decode(p[1])
                except DecodeError as e:
                    raise e.at(1) from None
                pairs.append((k, x))
            except DecodeError as e:
                raise e.at(i) from None
        keyed = sorted(
            ((self.key_type.key(self.key_type.prepare(k)), i) for i, (k, _) in enumerate(pairs)),
            key=lambda k: k[0],
        )
        for a, b in zip(keyed, keyed[1:]):
            if a[0] == b[0]:
                raise DecodeError("duplicate key in a dict").at(max(a[1], b[1]))
        ordered = [pairs[i] for _, i in keyed]
        if self.key_type.hashable():
            return dict(ordered)
        return tuple(ordered)

    def prepare(self, v):
        if isinstance(v, Mapping):
            entries = list(v.items())
        elif not self.text_keys and isinstance(v, (list, tuple)):
            entries = list(v)
            for i, e in enumerate(entries):
                if not isinstance(e, (list, tuple)) or len(e) != 2:
                    raise DecodeError("expected a (key, value) pair").at(i)
        else:
            raise self.refuse(v)
        prepared = []
        for i, (k, x) in enumerate(entries):
            try:
                nk = self.key_type.prepare(k)
            except DecodeError as e:
                raise e.at(k if self.text_keys and isinstance(k, str) else i) from None
            try:
                nx = self.value.prepare(x)
            except DecodeError as e:
                raise e.at(k if self.text_keys else i) from None
            prepared.append((self.key_type.key(nk), nk, nx))
        prepared.sort(key=lambda e: e[0])
        for a, b in zip(prepared, prepared[1:]):
            if a[0] == b[0]:
                raise DecodeError("duplicate key in a dict")
        return tuple((nk, nx) for _, nk, nx in prepared)

    def write(self, n, out):
        if self.text_keys:
            out.append("{")
            for i, (k, x) in enumerate(n):
                if i:
                    out.append(",")
                out.append(jsontext.write_str(k))
                out.append(":")
                self.value.write(x, out)
            out.append("}")
            return
        out.append("[")
        for i, (k, x) in enumerate(n):
            if i:
                out.append(",")
            out.append("[")
            self.key_type.write(k, out)
            out.append(",")
            self.value.write(x, out)
            out.append("]")
        out.append("]")

    def key(self, n):
        return tuple((self.key_type.key(k), self.value.key(x)) for k, x in n)
