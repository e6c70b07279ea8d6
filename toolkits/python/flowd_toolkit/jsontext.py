"""Strict JSON reading, exact numbers and the canonical writer.

host-boundary.txt, "The canonical form": no whitespace outside strings,
object keys in ascending code-point order, strings escaping only ``"``,
``\\`` and U+0000..U+001F (``\\b \\f \\n \\r \\t`` where one exists, lowercase
``\\u00xx`` otherwise), numbers in plain decimal notation. This module gives
byte-identical text to flow-abi's writer (``abi/src/json.rs``) and refuses
what its reader refuses: duplicate keys, lone surrogates, raw control
characters, nesting deeper than 128, numbers past their limits (judged by
value, never expanded: ``1e5000`` is refused without being written out).

The reader is the standard library's ``json`` scanner with hooks: every
number token is kept as a :class:`Num` (sign, significant digits, exponent),
so nothing passes through binary floating point.
"""

import json
import re
from decimal import Decimal

MAX_DEPTH = 128
MAX_INT_DIGITS = 1000
MAX_DECIMAL_DIGITS = 1000
MAX_NUMBER_TEXT = 4096
MAX_TEXT_BYTES = 16 << 20

_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1
_NUMBER = re.compile(r"(-?)(0|[1-9][0-9]*)(?:\.([0-9]+))?(?:[eE]([+-]?)([0-9]+))?\Z")
_SURROGATE = re.compile("[\ud800-\udfff]")


class DecodeError(ValueError):
    """A refusal to decode: a JSONPath into the value and what is wrong,
    e.g. ``$.items[3].price: expected Decimal, found string "9.99"``."""

    def __init__(self, message, path=()):
        super().__init__(message)
        self.message = message
        self.segments = list(path)

    def at(self, segment):
        """The error as seen from the container holding it at ``segment``
        (a key or an index)."""
        self.segments.insert(0, segment)
        return self

    @property
    def path(self):
        out = ["$"]
        for seg in self.segments:
            if isinstance(seg, int):
                out.append(f"[{seg}]")
            elif _plain_name(seg):
                out.append("." + seg)
            else:
                out.append("[" + write_str(seg) + "]")
        return "".join(out)

    def __str__(self):
        return f"{self.path}: {self.message}"


def _plain_name(k):
    return bool(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", k))


class Num:
    """A finite decimal number ``(-1)^neg * digits * 10^exp`` with ``digits``
    stripped of leading and trailing zeros ("" for zero, never negative):
    abi/src/number.rs's ``Num``. Limits are comparisons of small integers."""

    __slots__ = ("neg", "digits", "exp")

    def __init__(self, neg, digits, exp):
        self.neg = neg and digits != ""
        self.digits = digits
        self.exp = exp if digits else 0

    @staticmethod
    def parse(text):
        """Reads a JSON number token (RFC 8259 grammar, ASCII digits only)."""
        m = _NUMBER.match(text)
        if not m:
            raise DecodeError("malformed number")
        sign, int_digits, frac, exp_sign, exp_digits = m.groups()
        frac = frac or ""
        exp = 0
        if exp_digits is not None:
            e = exp_digits.lstrip("0")
            if len(e) > 19:
                raise DecodeError("number's exponent is out of range")
            exp = int(e or "0")
            exp = -exp if exp_sign == "-" else exp
            if not _I64_MIN <= exp <= _I64_MAX:
                raise DecodeError("number's exponent is out of range")
        exp -= len(frac)
        if exp < _I64_MIN:
            raise DecodeError("number's exponent is out of range")
        digits = (int_digits + frac).lstrip("0")
        kept = digits.rstrip("0")
        if not kept:
            return Num(False, "", 0)
        exp += len(digits) - len(kept)
        if exp > _I64_MAX:
            raise DecodeError("number's exponent is out of range")
        return Num(sign == "-", kept, exp)

    @staticmethod
    def of_int(i):
        s = str(abs(i))
        kept = s.rstrip("0")
        return Num(i < 0, kept if i else "", len(s) - len(kept))

    @staticmethod
    def of_decimal(d):
        """An exact Decimal (never NaN or infinite), normalized by value."""
        sign, digits, exp = d.as_tuple()
        if not isinstance(exp, int):
            raise DecodeError(f"{d} is not a finite number")
        ds = "".join(map(str, digits)).lstrip("0")
        kept = ds.rstrip("0")
        return Num(bool(sign), kept, exp + len(ds) - len(kept))

    def is_integer(self):
        return self.exp >= 0 or not self.digits

    def canonical_len(self):
        if not self.digits:
            return 1
        n, e = len(self.digits), self.exp
        body = n + e if e >= 0 else (n + 1 if n + e > 0 else 2 + (-(n + e)) + n)
        return int(self.neg) + body

    def canonical(self):
        """The canonical text; callers check the limits first."""
        if not self.digits:
            return "0"
        sign = "-" if self.neg else ""
        n, e = len(self.digits), self.exp
        if e >= 0:
            return sign + self.digits + "0" * e
        if n + e > 0:
            return sign + self.digits[: n + e] + "." + self.digits[n + e :]
        return sign + "0." + "0" * (-(n + e)) + self.digits

    def check_decimal(self):
        if len(self.digits) > MAX_DECIMAL_DIGITS:
            raise DecodeError(
                f"number has {len(self.digits)} significant digits, more than the limit of {MAX_DECIMAL_DIGITS}"
            )
        if self.canonical_len() > MAX_NUMBER_TEXT:
            raise DecodeError(
                f"number's canonical text would be longer than {MAX_NUMBER_TEXT} characters"
            )

    def check_int(self):
        if not self.is_integer():
            raise DecodeError("expected Int, found a number that is not one: number is not whole")
        if self.digits and len(self.digits) + self.exp > MAX_INT_DIGITS:
            raise DecodeError(
                f"expected Int, found a number that is not one: integer past the limit of {MAX_INT_DIGITS} decimal digits"
            )

    def to_int(self):
        """The Int; call :meth:`check_int` first."""
        v = int(self.digits or "0") * 10**self.exp
        return -v if self.neg else v

    def to_decimal(self):
        """The exact Decimal; call :meth:`check_decimal` first."""
        if not self.digits:
            return Decimal(0)
        return Decimal((int(self.neg), tuple(int(c) for c in self.digits), self.exp))

    def to_python(self):
        """A ``json.Value`` number: an ``int`` when whole, else a Decimal."""
        return self.to_int() if self.is_integer() else self.to_decimal()

    def __eq__(self, other):
        return isinstance(other, Num) and (self.neg, self.digits, self.exp) == (
            other.neg,
            other.digits,
            other.exp,
        )

    def __hash__(self):
        return hash((self.neg, self.digits, self.exp))

    def __repr__(self):
        return f"Num({self.canonical()})"


class _Duplicate(Exception):
    pass


def _pairs(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise _Duplicate(k)
        d[k] = v
    return d


def _constant(name):
    raise DecodeError(f"{name} is not JSON")


def _checked_number(token):
    n = Num.parse(token)
    n.check_decimal()
    return n


def _decoder(number):
    return json.JSONDecoder(
        parse_float=number,
        parse_int=number,
        parse_constant=_constant,
        object_pairs_hook=_pairs,
        strict=True,
    )


# Numbers are judged as they are read; a refusal is then found again by the
# walk below, which knows its path.
_DECODER = _decoder(_checked_number)
_LENIENT = _decoder(Num.parse)
# Only a \u escape of a surrogate can make a lone surrogate (the text itself
# is UTF-8); only a long text can hold a long string; only many brackets can
# nest deeply. Texts with none of these need no walk.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def parse(text):
    """Reads one JSON text strictly into a tree of ``None``, ``bool``,
    :class:`Num`, ``str``, ``list`` and ``dict`` (keys in text order)."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            raise DecodeError(f"not UTF-8: {e}") from None
    try:
        try:
            tree = _DECODER.decode(text)
        except DecodeError:
            tree = _LENIENT.decode(text)
            _check(tree)
            raise
    except RecursionError:
        raise DecodeError(f"nesting deeper than the limit of {MAX_DEPTH}") from None
    except _Duplicate as e:
        raise DecodeError(f"duplicate key {write_str(e.args[0])}") from None
    except json.JSONDecodeError as e:
        raise DecodeError(f"invalid JSON at character {e.pos}: {e.msg}") from None
    if (
        len(text) > MAX_TEXT_BYTES // 4
        or text.count("[") + text.count("{") > MAX_DEPTH
        or ("\\u" in text and _SURROGATE_ESCAPE.search(text))
    ):
        _check(tree)
    return tree


def _check(tree):
    """Depth, lone surrogates, text sizes and number limits over the whole
    tree (iteratively: the depth is only known by walking)."""
    stack = [(tree, 0, ())]
    while stack:
        v, depth, path = stack.pop()
        if isinstance(v, str):
            _check_text(v, path)
        elif isinstance(v, Num):
            try:
                v.check_decimal()
            except DecodeError as e:
                e.segments = list(path)
                raise
        elif isinstance(v, (list, dict)):
            if depth + 1 > MAX_DEPTH:
                raise DecodeError(f"nesting deeper than the limit of {MAX_DEPTH}", path)
            if isinstance(v, list):
                stack.extend((x, depth + 1, path + (i,)) for i, x in enumerate(v))
            else:
                for k, x in v.items():
                    _check_text(k, path + (k,))
                    stack.append((x, depth + 1, path + (k,)))


def _check_text(s, path):
    if _SURROGATE.search(s):
        raise DecodeError("lone surrogate in \\u escape", path)
    if len(s) > MAX_TEXT_BYTES // 4 and len(s.encode("utf-8", "surrogatepass")) > MAX_TEXT_BYTES:
        raise DecodeError(f"text longer than the limit of {MAX_TEXT_BYTES} bytes", path)


_ESCAPES = {i: f"\\u{i:04x}" for i in range(0x20)}
_ESCAPES.update({0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"})
_ESCAPES.update({ord('"'): '\\"', ord("\\"): "\\\\"})


def write_str(s):
    """A JSON string, canonically escaped."""
    return '"' + s.translate(_ESCAPES) + '"'


def check_text(s):
    """Refuses a ``str`` that is not a Text (a lone surrogate is no UTF-8)."""
    if _SURROGATE.search(s):
        raise DecodeError("a Text holds no lone surrogate")


def canonical(v):
    """The canonical text of a JSON tree: ``None``, ``bool``, ``int``,
    ``Decimal``, :class:`Num`, ``str``, ``list``/``tuple`` and ``dict`` with
    ``str`` keys. ``float`` is refused: it is not exact."""
    out = []
    _write(v, out, 0)
    return "".join(out)


def _write(v, out, depth):
    if depth > MAX_DEPTH:
        raise DecodeError(f"nesting deeper than the limit of {MAX_DEPTH}")
    if v is None:
        out.append("null")
    elif v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif isinstance(v, str):
        check_text(v)
        out.append(write_str(v))
    elif isinstance(v, int):
        out.append(number_text(Num.of_int(v)))
    elif isinstance(v, Decimal):
        out.append(number_text(Num.of_decimal(v)))
    elif isinstance(v, Num):
        out.append(number_text(v))
    elif isinstance(v, (list, tuple)):
        out.append("[")
        for i, x in enumerate(v):
            if i:
                out.append(",")
            _write(x, out, depth + 1)
        out.append("]")
    elif isinstance(v, dict):
        for k in v:
            if not isinstance(k, str):
                raise DecodeError(f"JSON object keys are strings, found {type(k).__name__}")
        out.append("{")
        for i, k in enumerate(sorted(v)):
            if i:
                out.append(",")
            check_text(k)
            out.append(write_str(k))
            out.append(":")
            _write(v[k], out, depth + 1)
        out.append("}")
    elif isinstance(v, float):
        raise DecodeError(
            f"float {v!r} is not exact: use decimal.Decimal or int for JSON numbers"
        )
    else:
        raise DecodeError(f"{type(v).__name__} is not JSON")


def number_text(n):
    """A number's canonical text, within the Decimal limits."""
    n.check_decimal()
    return n.canonical()


def to_python(tree):
    """A parsed tree as plain Python JSON: numbers become ``int`` (whole) or
    ``Decimal``."""
    if isinstance(tree, Num):
        return tree.to_python()
    if isinstance(tree, list):
        return [to_python(x) for x in tree]
    if isinstance(tree, dict):
        return {k: to_python(x) for k, x in tree.items()}
    return tree
