"""The Python classes Flow values become: records as frozen dataclasses,
enums as a tagged form, and :class:`Some` where an Option's inner values
include ``None``.

Record and enum classes are made per declaration from the ``flow tools``
document (never from Flow source), so two declarations of one name stay
two classes.
"""

import dataclasses
import keyword
import re
from typing import Any


@dataclasses.dataclass(frozen=True)
class Some:
    """``Some(v)`` of an Option whose inner type has ``None`` among its own
    values (``Option<Unit>``, ``Option<json.Value>``, ``Option<Option<T>>``),
    so that Some(None) and None stay apart. Every other Option is ``None``
    or the bare value."""

    value: Any


def python_name(name, taken, fallback):
    """``name`` if it can be a Python attribute, else ``fallback`` (made
    unique against ``taken``)."""
    ok = name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("__")
    out = name if ok and name not in taken else fallback
    while out in taken:
        out += "_"
    taken.add(out)
    return out


def class_name(name):
    cleaned = re.sub(r"\W", "_", name) or "Value"
    if cleaned[0].isdigit() or keyword.iskeyword(cleaned):
        cleaned = "T_" + cleaned
    return cleaned


def make_record_class(decl):
    """A frozen, keyword-only dataclass with one attribute per field in
    declaration order. Option fields default to ``None`` (absent). A field
    whose name is no Python identifier gets ``f<index>``; ``__flow_fields__``
    maps every Flow field name to its attribute."""
    taken = set()
    attrs = []
    specs = []
    for i, f in enumerate(decl.fields):
        attr = python_name(f.name, taken, f"f{i}")
        attrs.append((f.name, attr))
        if f.optional:
            specs.append((attr, Any, dataclasses.field(default=None)))
        else:
            specs.append((attr, Any))
    cls = dataclasses.make_dataclass(
        class_name(decl.name), specs, frozen=True, kw_only=True
    )
    cls.__flow_decl__ = decl
    cls.__flow_fields__ = dict(attrs)
    cls.__doc__ = decl.doc or f"The record {decl.identity}."
    cls.__qualname__ = cls.__name__
    cls.__module__ = "flowd_toolkit.generated"
    return cls


_NOTHING = object()


class EnumValue:
    """Base of the generated enum classes: one constructor ``tag`` and, for
    a constructor with a payload, its ``value``. ``Severity("high")``,
    ``Shape("circle", Decimal("1.5"))``; a constructor without payload whose
    name is an identifier is also a class attribute (``Severity.high``).
    Works with ``match``: ``case Shape(tag="circle", value=r)``."""

    __slots__ = ("tag", "value")
    __match_args__ = ("tag", "value")
    __flow_decl__ = None

    def __init__(self, tag, value=_NOTHING):
        ctors = type(self).__flow_ctors__
        if tag not in ctors:
            raise ValueError(
                f"{tag!r} is not a constructor of enum {type(self).__name__} "
                f"(expected one of {', '.join(map(repr, ctors))})"
            )
        has_payload = ctors[tag][1] is not None
        if has_payload and value is _NOTHING:
            raise ValueError(f"constructor {tag!r} takes a payload")
        if not has_payload and value is not _NOTHING:
            raise ValueError(f"constructor {tag!r} has no payload")
        object.__setattr__(self, "tag", tag)
        object.__setattr__(self, "value", None if value is _NOTHING else value)

    def __setattr__(self, name, value):
        raise AttributeError("enum values are immutable")

    @property
    def index(self):
        """The constructor's position in the declaration."""
        return type(self).__flow_ctors__[self.tag][0]

    def __eq__(self, other):
        return type(other) is type(self) and (self.tag, self.value) == (other.tag, other.value)

    def __hash__(self):
        return hash((type(self).__name__, self.tag, self.value))

    def __repr__(self):
        if type(self).__flow_ctors__[self.tag][1] is None:
            return f"{type(self).__name__}({self.tag!r})"
        return f"{type(self).__name__}({self.tag!r}, {self.value!r})"


def make_enum_class(decl):
    """A subclass of :class:`EnumValue` for the enum ``decl``."""
    ctors = {c.name: (i, c.payload) for i, c in enumerate(decl.ctors)}
    cls = type(
        class_name(decl.name),
        (EnumValue,),
        {
            "__slots__": (),
            "__flow_decl__": decl,
            "__flow_ctors__": ctors,
            "__doc__": decl.doc or f"The enum {decl.identity}.",
            "__module__": "flowd_toolkit.generated",
        },
    )
    reserved = set(dir(EnumValue))
    for c in decl.ctors:
        if (
            c.payload is None
            and c.name.isidentifier()
            and not keyword.iskeyword(c.name)
            and c.name not in reserved
        ):
            setattr(cls, c.name, cls(c.name))
    return cls
