"""The strict reader and the canonical writer (ENC-10..ENC-14, DEC-6):
the same refusals and the same bytes as abi/src/json.rs and number.rs."""

from decimal import Decimal

import pytest

from flowd_toolkit import jsontext
from flowd_toolkit.jsontext import DecodeError, Num, canonical, parse


def test_canonicalizes_like_the_rust_writer():
    v = parse('{"b":[1.50,{"d":1,"c":2}],"a":null, "e": "\\u00e9\\u001F"}')
    assert canonical(v) == '{"a":null,"b":[1.5,{"c":2,"d":1}],"e":"é\\u001f"}'


@pytest.mark.parametrize(
    "bad",
    [
        '{"a":1,"a":2}',
        '"\\ud800"',
        '"\\udc00x"',
        '"\\ud800\\u0041"',
        "[1,]",
        "{,}",
        "01",
        "NaN",
        "Infinity",
        "-Infinity",
        "[1] x",
        '"a\nb"',
        "1e5000000",
        "",
        "tru",
        "\ufeff1",
        "1.",
        ".5",
        "+1",
        "0x10",
        "١",  # an Arabic-Indic digit is no JSON digit
    ],
)
def test_refuses(bad):
    with pytest.raises(DecodeError):
        parse(bad)


def test_depth_limit():
    assert parse("[" * 128 + "]" * 128) is not None
    with pytest.raises(DecodeError, match="nesting deeper"):
        parse("[" * 129 + "]" * 129)
    with pytest.raises(DecodeError, match="nesting deeper"):
        parse("[" * 100000 + "]" * 100000)


@pytest.mark.parametrize(
    "text,canon",
    [
        ("0", "0"),
        ("-0", "0"),
        ("-0.0e7", "0"),
        ("1e3", "1000"),
        ("1.50", "1.5"),
        ("2.5E+3", "2500"),
        ("1e-7", "0.0000001"),
        ("-12.000", "-12"),
        ("0.1e1", "1"),
        ("123.456e-1", "12.3456"),
        ("100", "100"),
        ("0.00100", "0.001"),
        ("1E00", "1"),
    ],
)
def test_number_spellings(text, canon):
    assert Num.parse(text).canonical() == canon
    assert canonical(parse(text)) == canon


def test_numbers_are_judged_by_value_without_expanding():
    n = Num.parse("1e5000")
    with pytest.raises(DecodeError):
        n.check_int()
    with pytest.raises(DecodeError):
        n.check_decimal()
    with pytest.raises(DecodeError):
        Num.parse("1e-99999999999999").check_decimal()
    with pytest.raises(DecodeError, match="exponent"):
        Num.parse("1e99999999999999999999999")
    with pytest.raises(DecodeError, match="exponent"):
        Num.parse("1e" + "9" * 100000)
    Num.parse("1" + "0" * 999).check_int()
    with pytest.raises(DecodeError):
        Num.parse("1" + "0" * 1000).check_int()
    for s in ["0", "-1", "1e3", "1.25", "-0.001", "123.456", "9e-3", "-5e2"]:
        n = Num.parse(s)
        assert n.canonical_len() == len(n.canonical())


def test_string_escapes_only_what_the_seed_says():
    s = "".join(chr(c) for c in range(0x20)) + '"\\/\x7f\u2028é😀'
    assert canonical(s) == (
        '"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\b\\t\\n\\u000b\\f\\r'
        "\\u000e\\u000f\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\\u0018"
        '\\u0019\\u001a\\u001b\\u001c\\u001d\\u001e\\u001f\\"\\\\/\x7f\u2028é😀"'
    )
    with pytest.raises(DecodeError):
        canonical("\ud800")


def test_keys_sort_by_code_point_not_utf16():
    # U+E000 sorts before U+1F600 by code point, after it by UTF-16 units.
    assert canonical({"😀": 1, "\ue000": 2, "a": 3, "": 4}) == '{"":4,"a":3,"\ue000":2,"😀":1}'


def test_writer_refuses_floats_and_strangers():
    with pytest.raises(DecodeError, match="not exact"):
        canonical({"x": 0.5})
    with pytest.raises(DecodeError):
        canonical({1: 2})
    with pytest.raises(DecodeError):
        canonical(Decimal("NaN"))
    assert canonical([True, False, None, Decimal("-0.0"), 10**30]) == "[true,false,null,0,1000000000000000000000000000000]"


def test_error_paths():
    with pytest.raises(DecodeError) as e:
        parse('{"a":[1,{"b odd":"\\ud800"}]}')
    assert str(e.value).startswith('$.a[1]["b odd"]: ')


def test_text_limit():
    big = '"' + "x" * (jsontext.MAX_TEXT_BYTES + 1) + '"'
    with pytest.raises(DecodeError, match="longer than the limit"):
        parse(big)
