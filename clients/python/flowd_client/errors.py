"""Typed errors from the server's problem+json answers (RFC 9457).

Every error flowd answers is ``application/problem+json``:
``{"type", "title", "status", "detail", "diagnostics"?}``. The status picks
the class, so callers catch what they can act on:

* :class:`NotFound` (404): no such run, call, checkpoint, module or blob;
* :class:`Conflict` (409): the call is not open, the run has ended, or the
  server is driving the run now;
* :class:`Refused` (400, 413, 422): the request was refused and nothing was
  recorded (a flow that does not check, an unbound Tool, an input or reply
  that does not decode; ``diagnostics`` says where);
* :class:`Unavailable` (503, or no answer at all: connection refused or
  cut): try again later;
* :class:`FlowdError`, their base, for every other status (401, 403, 408,
  500).
"""


class FlowdError(Exception):
    """An error answer: ``status``, ``title``, ``detail``, ``type`` and
    ``diagnostics`` (a list, empty when the server sent none)."""

    def __init__(self, status, title, detail, diagnostics=None, type_=None):
        super().__init__(f"{status} {title}: {detail}")
        self.status = status
        self.title = title
        self.detail = detail
        self.diagnostics = list(diagnostics or [])
        self.type = type_


class NotFound(FlowdError):
    pass


class Conflict(FlowdError):
    pass


class Refused(FlowdError):
    pass


class Unavailable(FlowdError):
    pass


_BY_STATUS = {400: Refused, 404: NotFound, 409: Conflict, 413: Refused, 422: Refused, 503: Unavailable}


def from_problem(status, body):
    """The error for an answer with ``status`` and a (parsed) body, which
    may not be a problem document at all (a proxy's page)."""
    cls = _BY_STATUS.get(status, FlowdError)
    if isinstance(body, dict):
        return cls(
            status,
            str(body.get("title", "")),
            str(body.get("detail", "")),
            body.get("diagnostics") or [],
            body.get("type"),
        )
    return cls(status, "", str(body)[:500])
