"""flowd_client: a Python client for flowd's HTTP API (standard library only).

::

    from flowd_client import Client

    c = Client("http://127.0.0.1:8080")
    run = c.start_run("examples/flows/review/review.json", {"text": "hello"}, wait=10)
    call = run["pending"][0]["call"]
    done = c.answer(run["run"], call, {"decision": "approved"}, wait=10)
    assert done["state"] == "completed"

Start, wait, get and list runs (paged), read and stream facts (SSE, resumed
with ``Last-Event-ID`` after a dropped connection), the open-call inbox,
resume, halt, replay, fork, export and import archives. Errors are typed from
the server's problem+json: :class:`FlowdError` and its subclasses
:class:`NotFound`, :class:`Conflict`, :class:`Refused`, :class:`Unavailable`.
"""

from .client import Client, Fact
from .errors import Conflict, FlowdError, NotFound, Refused, Unavailable

__all__ = ["Client", "Conflict", "Fact", "FlowdError", "NotFound", "Refused", "Unavailable"]
__version__ = "0.1.0"
