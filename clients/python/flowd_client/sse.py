"""Server-sent events, parsed by hand (the WHATWG event-stream format).

A stream is lines; ``field: value`` lines build an event (``id``,
``event``, ``data`` — several data lines join with newlines), a line
starting with ``:`` is a comment (flowd's keep-alive), and a blank line
dispatches the event. An event cut off before its blank line is never
dispatched, so a dropped connection loses nothing that resuming from the
last id will not send again.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Event:
    id: str
    event: str
    data: str


def events(lines):
    """Events from an iterable of raw lines (``bytes``, ending in ``\\n``);
    ends with the lines. A last line without its newline was cut off and
    ends the stream without dispatching."""
    ev_id, ev_type, data = "", "", []
    for raw in lines:
        if not raw.endswith(b"\n"):
            return
        line = raw.decode("utf-8").rstrip("\n").rstrip("\r")
        if not line:
            if data:
                yield Event(ev_id, ev_type or "message", "\n".join(data))
            ev_type, data = "", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            data.append(value)
        elif name == "event":
            ev_type = value
        elif name == "id" and "\0" not in value:
            ev_id = value
        # `retry` and unknown fields are ignored, as the format says.
