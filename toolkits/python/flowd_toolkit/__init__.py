"""flowd_toolkit: write a flowd Tool process in Python as typed functions.

::

    from flowd_toolkit import Toolkit, ToolError

    tk = Toolkit.from_file("tools.json")      # what `flow tools FLOW.json` printed
    store = {}

    @tk.tool("kv.json#put")
    def put(key: str, value: str) -> None:
        store[key] = value

    @tk.tool("kv.json#get")
    def get(key: str) -> str:
        if key not in store:
            raise ToolError(f"no value for {key}")
        return store[key]

    tk.run()

The toolkit answers describe from the document (so its fingerprints are the
declarations' own), decodes args strictly at the declared types (NotRun
when they do not decode), encodes results canonically (byte-identical to
flowd's writer), answers Failed for :class:`ToolError`, Unknown for any
other exception, runs calls concurrently, handles cancel, and keeps stdout
for protocol lines only. See ``codec`` for how Flow types look in Python.
"""

from .codec import Type
from .document import DocumentError, Listed
from .jsontext import DecodeError, canonical, parse
from .runtime import Call, NotRun, ToolError, Toolkit
from .temporal import Duration, Instant
from .values import EnumValue, Some

__all__ = [
    "Call",
    "DecodeError",
    "DocumentError",
    "Duration",
    "EnumValue",
    "Instant",
    "Listed",
    "NotRun",
    "Some",
    "ToolError",
    "Toolkit",
    "Type",
    "canonical",
    "parse",
]
__version__ = "0.1.0"
