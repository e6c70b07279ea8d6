"""Type-directed decoding and encoding (DEC-1, DEC-6, ENC-3, ENC-4, ENC-10,
ENC-18, TKT-2, TKT-3): no coercion, no defaults, exact numbers and times,
Option fields absent-or-value, records as dataclasses, enums tagged, sets
and dict keys in flow-abi's value order."""

import dataclasses
import datetime as dt
from decimal import Decimal

import pytest

from flowd_toolkit import DecodeError, Duration, Instant, Some
from flowd_toolkit.document import read, term

TYPES = {
    "t.Point": {
        "args": [], "doc": "A point.", "identity": "t.Point", "kind": "record", "name": "Point",
        "fields": [
            {"doc": None, "name": "y", "type": "Int"},
            {"doc": None, "name": "x", "type": "Int"},
            {"doc": None, "name": "label", "type": {"Option": "Text"}},
            {"doc": None, "name": "raw", "type": {"Option": "json.Value"}},
            {"doc": None, "name": "class", "type": {"Option": "Bool"}},
            {"doc": None, "name": "a b", "type": {"Option": "Unit"}},
        ],
    },
    "t.Shape": {
        "args": [], "doc": None, "identity": "t.Shape", "kind": "enum", "name": "Shape",
        "constructors": [
            {"doc": None, "name": "dot", "payload": None},
            {"doc": None, "name": "circle", "payload": {"positional": ["Decimal"]}},
            {"doc": None, "name": "None", "payload": None},
            {"doc": None, "name": "at", "payload": {"positional": [{"Named": "t.Point"}]}},
        ],
    },
    "t.Tree": {
        "args": [], "doc": None, "identity": "t.Tree", "kind": "record", "name": "Tree",
        "fields": [
            {"doc": None, "name": "label", "type": "Int"},
            {"doc": None, "name": "kids", "type": {"List": {"Named": "t.Tree"}}},
            {"doc": None, "name": "next", "type": {"Option": {"Named": "t.Tree"}}},
        ],
    },
}
_, DECLS = read({"data": "1.0", "programs": [{"root": "t", "diagnostics": [], "tools": [], "types": TYPES}]})


def ty(t):
    return term(t, "", DECLS)


POINT = ty({"Named": "t.Point"})
SHAPE = ty({"Named": "t.Shape"})
TREE = ty({"Named": "t.Tree"})
Point = DECLS["t.Point"].cls
Shape = DECLS["t.Shape"].cls


def roundtrip(t, text, canon=None):
    v = t.decode_text(text)
    assert t.encode(v) == (canon if canon is not None else text)
    return v


def test_numbers_are_exact():
    assert roundtrip(ty("Int"), "123456789012345678901234567890") == 123456789012345678901234567890
    assert roundtrip(ty("Int"), "1.0e2", "100") == 100
    assert roundtrip(ty("Decimal"), "0.10", "0.1") == Decimal("0.1")
    assert roundtrip(ty("Decimal"), "1e-30", "0.000000000000000000000000000001") == Decimal("1e-30")
    d = ty("Decimal")
    assert d.encode(Decimal("1.500")) == "1.5"
    assert d.encode(Decimal("-0")) == "0"
    assert d.encode(Decimal("12E+3")) == "12000"
    assert d.encode(7) == "7"
    # Decimal arithmetic beyond the default 28 digits is still written exactly.
    assert d.encode(Decimal("1." + "0" * 40 + "1")) == "1." + "0" * 40 + "1"
    for bad in (0.5, True, "1", Decimal("NaN"), Decimal("Infinity")):
        with pytest.raises(DecodeError):
            d.encode(bad)
    for bad in (True, 1.0, "1", Decimal(1)):
        with pytest.raises(DecodeError):
            ty("Int").encode(bad)
    with pytest.raises(DecodeError):
        ty("Int").encode(10**1000)
    ty("Int").encode(10**999)
    for bad in ('"1"', "1.5", "true", "null", "1e1000"):
        with pytest.raises(DecodeError):
            ty("Int").decode_text(bad)


def test_no_coercion():
    for t, bad in [("Text", "1"), ("Bool", "0"), ("Unit", "false"), ("Bytes", "[]"), ("Instant", "0"),
                   ("Duration", "90"), ("Never", "null"), ({"List": "Int"}, "{}"), ({"Tuple": ["Int", "Int"]}, "[1]"),
                   ({"Tuple": ["Int", "Int"]}, "[1,2,3]"), ({"Option": "Int"}, "null"), ({"Option": "Int"}, "1"),
                   ({"Option": "Int"}, '{"Some":1,"x":2}'), ({"Dict": ["Text", "Int"]}, "[]"),
                   ({"Dict": ["Int", "Int"]}, "{}"), ({"Dict": ["Int", "Int"]}, "[[1,2],[1,3]]"),
                   ({"Dict": ["Int", "Int"]}, "[[1]]"), ({"Set": "Int"}, "[1,1.0]")]:
        with pytest.raises(DecodeError):
            ty(t).decode_text(bad)


def test_bytes_base64_strictly():
    b = ty("Bytes")
    assert roundtrip(b, '"aGk="') == b"hi"
    assert roundtrip(b, '""') == b""
    assert b.encode(bytearray(b"\xff\x00")) == '"/wA="'
    for bad in ('"aGk"', '"aGl="', '"aG k="', '"_w=="', '"aGk=\\n"', '"éé=="'):
        with pytest.raises(DecodeError):
            b.decode_text(bad)


def test_times_keep_nanoseconds():
    i = roundtrip(ty("Instant"), '"2026-01-01T01:00:00.000000001+01:00"', '"2026-01-01T00:00:00.000000001Z"')
    assert isinstance(i, Instant) and i.nanos % 1000 == 1
    utc = dt.timezone.utc
    assert ty("Instant").encode(dt.datetime(2026, 1, 1, tzinfo=utc)) == '"2026-01-01T00:00:00Z"'
    with pytest.raises(DecodeError, match="naive"):
        ty("Instant").encode(dt.datetime(2026, 1, 1))
    assert roundtrip(ty("Duration"), '"PT1M0.5S"', '"PT60.5S"') == Duration(60_500_000_000)
    assert ty("Duration").encode(dt.timedelta(milliseconds=-250)) == '"PT-0.25S"'


def test_records_are_dataclasses_with_option_fields_absent_or_value():
    p = roundtrip(POINT, '{"x":1,"y":2}')
    assert dataclasses.is_dataclass(p) and p.x == 1 and p.y == 2 and p.label is None and p.raw is None
    assert Point.__flow_fields__ == {"y": "y", "x": "x", "label": "label", "raw": "raw", "class": "f4", "a b": "f5"}
    p = roundtrip(POINT, '{"a b":null,"class":true,"label":"l","raw":null,"x":1,"y":2}')
    assert (p.label, p.raw, p.f4, p.f5) == ("l", Some(None), True, Some(None))
    # Extra fields are judged as JSON and dropped; a missing field is not filled in.
    assert POINT.decode_text('{"x":1,"y":2,"z":[1e3]}') == Point(x=1, y=2)
    for bad in ('{"x":1}', '{"x":1,"y":2,"label":null}', '{"x":1,"y":2,"z":1e999999}', "[]"):
        with pytest.raises(DecodeError):
            POINT.decode_text(bad)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 5
    # Encoding takes the dataclass or a dict keyed by field name.
    assert POINT.encode({"x": 1, "y": 2, "label": None}) == '{"x":1,"y":2}'
    assert POINT.encode({"x": 1, "y": 2, "raw": Some({"k": [Decimal("1.0")]})}) == '{"raw":{"k":[1]},"x":1,"y":2}'
    for bad in ({"x": 1}, {"x": 1, "y": 2, "z": 3}, {"x": 1, "y": 2, "raw": {"k": 1}}, [1, 2]):
        with pytest.raises(DecodeError):
            POINT.encode(bad)


def test_enums_are_tagged():
    assert roundtrip(SHAPE, '"dot"') == Shape("dot") == Shape.dot
    c = roundtrip(SHAPE, '{"circle":1.50}', '{"circle":1.5}')
    assert (c.tag, c.value, c.index) == ("circle", Decimal("1.5"), 1)
    assert roundtrip(SHAPE, '"None"') == Shape("None")
    assert roundtrip(SHAPE, '{"at":{"x":1,"y":2}}').value == Point(x=1, y=2)
    match c:
        case Shape(tag="circle", value=r):
            assert r == Decimal("1.5")
    for bad in ('"circle"', '{"dot":null}', '{}', '{"dot":1,"circle":2}', '"square"', "1"):
        with pytest.raises(DecodeError):
            SHAPE.decode_text(bad)
    assert SHAPE.encode("dot") == '"dot"'
    assert SHAPE.encode({"circle": 2}) == '{"circle":2}'
    assert SHAPE.encode(Shape("at", {"x": 3, "y": 4})) == '{"at":{"x":3,"y":4}}'
    for bad in ("square", "circle", {"dot": 1}, 3):
        with pytest.raises(DecodeError):
            SHAPE.encode(bad)
    with pytest.raises(ValueError):
        Shape("circle")


def test_option_outside_fields_and_some():
    o = ty({"Option": "Int"})
    assert roundtrip(o, '"None"') is None
    assert roundtrip(o, '{"Some":3}') == 3
    oo = ty({"Option": {"Option": "Int"}})
    assert roundtrip(oo, '{"Some":"None"}') == Some(None)
    assert roundtrip(oo, '{"Some":{"Some":1}}') == Some(1)
    assert roundtrip(oo, '"None"') is None
    with pytest.raises(DecodeError, match="Some"):
        oo.encode(1)
    assert ty({"Option": "Unit"}).encode(Some(None)) == '{"Some":null}'


def test_sets_and_dicts_in_value_order():
    s = ty({"Set": "Decimal"})
    v = roundtrip(s, "[10, 2, -1.5, 0.25]", "[-1.5,0.25,2,10]")
    assert v == frozenset({Decimal(10), Decimal(2), Decimal("-1.5"), Decimal("0.25")})
    assert s.encode({Decimal("1.0"), Decimal("0.5")}) == "[0.5,1]"
    with pytest.raises(DecodeError, match="duplicate"):
        s.encode([Decimal("1.0"), Decimal("1")])
    # Texts by code point, not UTF-16 units.
    assert ty({"Set": "Text"}).encode({"😀", "\ue000", "a"}) == '["a","\ue000","😀"]'
    # Unhashable elements: a tuple in canonical order.
    sl = ty({"Set": {"List": "Int"}})
    assert roundtrip(sl, "[[2],[1,5],[1]]", "[[1],[1,5],[2]]") == ([1], [1, 5], [2])
    # Records field by field in name order, an absent Option field first.
    sp = ty({"Set": {"Named": "t.Point"}})
    assert sp.encode([{"x": 2, "y": 1}, {"x": 1, "y": 1}, {"x": 1, "y": 1, "label": "a"}]) == (
        '[{"label":"a","x":1,"y":1},{"x":1,"y":1},{"x":2,"y":1}]'
    )
    # Enums by constructor index, then payload.
    assert ty({"Set": {"Named": "t.Shape"}}).encode(["None", {"circle": 2}, {"circle": 1}, "dot"]) == (
        '["dot",{"circle":1},{"circle":2},"None"]'
    )
    si = ty({"Set": "Instant"})
    assert si.encode([Instant(5), Instant(-5)]) == '["1969-12-31T23:59:59.999999995Z","1970-01-01T00:00:00.000000005Z"]'
    d = ty({"Dict": ["Int", "Text"]})
    assert roundtrip(d, '[[3,"c"],[-1,"a"]]', '[[-1,"a"],[3,"c"]]') == {-1: "a", 3: "c"}
    assert d.encode({10: "x", 9: "y"}) == '[[9,"y"],[10,"x"]]'
    assert d.encode([(1, "a")]) == '[[1,"a"]]'
    td = ty({"Dict": ["Text", "Int"]})
    assert roundtrip(td, '{"b":1,"a":2}', '{"a":2,"b":1}') == {"a": 2, "b": 1}
    with pytest.raises(DecodeError):
        td.encode({1: 2})


def test_json_value_passes_through():
    j = ty("json.Value")
    assert roundtrip(j, '{"b":[1.50,null,true],"a":"x"}', '{"a":"x","b":[1.5,null,true]}') == {
        "a": "x", "b": [Decimal("1.5"), None, True]}
    with pytest.raises(DecodeError, match="not exact"):
        j.encode({"x": 0.1})


def test_recursive_types():
    text = '{"kids":[{"kids":[],"label":2}],"label":1,"next":{"kids":[],"label":3}}'
    t = roundtrip(TREE, text)
    assert t.kids[0].label == 2 and t.next.label == 3
    assert ty({"Set": {"Named": "t.Tree"}}).hashable() is False


def test_errors_name_the_path():
    t = ty({"List": {"Named": "t.Point"}})
    with pytest.raises(DecodeError) as e:
        t.decode_text('[{"x":1,"y":2},{"x":"1","y":2}]')
    assert str(e.value) == '$[1].x: expected Int, found string "1"'
