"""The client: one method per endpoint of flowd's HTTP API (docs/http.md).

Answers are the server's JSON as Python values, with every number exact:
whole numbers are ``int`` and others ``decimal.Decimal`` (a ``float`` is
accepted in requests). Errors are :mod:`flowd_client.errors` classes.
"""

import http.client
import json
import os
import socket
import time
import urllib.parse
from dataclasses import dataclass
from decimal import Decimal

from . import sse
from .errors import FlowdError, Unavailable, from_problem


@dataclass(frozen=True)
class Fact:
    """One fact of a run's history as the feed sends it: its number, its
    kind (Start, Call, Reply, Close, Checkpoint, End) and the stored fact."""

    n: int
    kind: str
    fact: dict


def _loads(body):
    return json.loads(body, parse_float=Decimal)


def _dumps(v):
    """JSON for a request; Decimals are written exactly."""
    if isinstance(v, Decimal):
        if not v.is_finite():
            raise ValueError(f"{v} is not a JSON number")
        return format(v, "f")
    if isinstance(v, dict):
        return "{" + ",".join(_dumps(str(k)) + ":" + _dumps(x) for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_dumps(x) for x in v) + "]"
    return json.dumps(v, ensure_ascii=False, allow_nan=False)


def _flow_doc(flow, name):
    """A flow given as a dict, its JSON text, or a path to its file, and
    its module name (for a file, its file name unless ``name`` says
    otherwise: the server's ``--tools`` manifests bind Tools by it)."""
    if isinstance(flow, dict) or (isinstance(flow, str) and flow.lstrip().startswith("{")):
        return flow, name
    with open(flow, encoding="utf-8") as f:
        return f.read(), name or os.path.basename(flow)


class Client:
    """A flowd server at ``base_url`` (``http://127.0.0.1:8080``)::

        c = Client("http://127.0.0.1:8080")
        run = c.start_run("examples/flows/review/review.json", {"text": "hello"}, wait=10)
        c.answer(run["run"], run["pending"][0]["call"], {"decision": "approved"}, wait=10)
    """

    def __init__(self, base_url, token=None, timeout=60):
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self._scheme = u.scheme
        self._host = u.hostname
        self._port = u.port
        self._prefix = u.path.rstrip("/")
        self.token = token
        self.timeout = timeout

    # Transport.

    def _connection(self, timeout=None):
        cls = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
        return cls(self._host, self._port, timeout=timeout or self.timeout)

    def _headers(self, extra=None):
        h = {"Accept": "application/json"}
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        h.update(extra or {})
        return h

    def _path(self, path, query=None):
        q = {k: v for k, v in (query or {}).items() if v is not None}
        return self._prefix + path + ("?" + urllib.parse.urlencode(q) if q else "")

    def _open(self, method, path, body=None, headers=None, query=None, timeout=None):
        """Sends a request; returns (connection, response) for a 2xx
        answer, raises the typed error otherwise."""
        conn = self._connection(timeout)
        try:
            conn.request(method, self._path(path, query), body=body, headers=self._headers(headers))
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise Unavailable(0, "no answer", f"{method} {path}: {e}") from None
        if resp.status >= 300:
            data = resp.read()
            conn.close()
            try:
                parsed = _loads(data)
            except ValueError:
                parsed = data.decode("utf-8", "replace")
            raise from_problem(resp.status, parsed)
        return conn, resp

    def _call(self, method, path, body=None, query=None, timeout=None):
        """A JSON request and its JSON answer."""
        data = None if body is None else _dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json"} if data is not None else {}
        conn, resp = self._open(method, path, data, headers, query, timeout)
        try:
            raw = resp.read()
        finally:
            conn.close()
        return _loads(raw) if raw else None

    @staticmethod
    def _wait_timeout(wait):
        # The server answers a `wait` request within `wait` seconds (≤ 30).
        return None if wait is None else max(60, wait + 30)

    @staticmethod
    def _q(s):
        return urllib.parse.quote(s, safe="")

    # Runs.

    def health(self):
        return self._call("GET", "/healthz")

    def check(self, flow, modules=None, name=None):
        """Diagnostics for a flow: ``{diagnostics, errors, ok}``."""
        flow, name = _flow_doc(flow, name)
        return self._call("POST", "/v1/check", _body(flow=flow, modules=modules, name=name))

    def start_run(self, flow, input, modules=None, name=None, wait=None):
        """``flow``: a FlowSpec document as a dict, its text, or a path.
        Records Start and drives the run. Without ``wait`` the answer is
        ``{run, state: "running"}`` at once; with ``wait`` (seconds, at most
        30) it is the run's result when it ends or pauses by then:
        ``completed`` with ``exit`` and ``output``, ``faulted`` with
        ``fault``, or ``paused`` with the ``pending`` calls."""
        flow, name = _flow_doc(flow, name)
        body = _body(flow=flow, input=input, modules=modules, name=name, wait=wait)
        return self._call("POST", "/v1/runs", body, timeout=self._wait_timeout(wait))

    def get_run(self, run):
        """State, ending, exit, output, fault, pending calls, lastFact,
        parent, children and timestamps."""
        return self._call("GET", f"/v1/runs/{self._q(run)}")

    def wait(self, run, until=("paused", "completed", "faulted", "halted"), timeout=60, poll=0.1):
        """Polls :meth:`get_run` until the run's state is one of ``until``."""
        deadline = time.monotonic() + timeout
        while True:
            view = self.get_run(run)
            if view.get("state") in until:
                return view
            if time.monotonic() > deadline:
                raise TimeoutError(f"run {run} is still {view.get('state')} after {timeout} s")
            time.sleep(poll)

    def runs(self, limit=None, after=None, state=None, *, before=None, newest=False, flow=None,
             entry=None, started_from=None, started_to=None, updated_from=None, updated_to=None,
             fork_of=None, nested_in=None, fault=None, attrs=None, counts=False):
        """One page of the run query (docs/http.md, "Finding runs"):
        ``{runs, nextAfter, nextBefore, problems, scanned, counts}``.

        Every filter combines with the others: ``state`` (one state, or a
        list of them), ``flow`` (the root FlowSpec id), ``entry`` (module or
        ``module#function``), ``started_from``/``started_to`` and
        ``updated_from``/``updated_to`` (unix ms, ``[from, to)``),
        ``fork_of``, ``nested_in`` (run ids), ``fault`` (text in a faulted
        run's fault), ``attrs`` (a dict of search attributes, each a str,
        int or bool, that must be equal). ``newest=True`` pages newest first
        with ``before``; ``counts=True`` adds counts by state and by flow."""
        if isinstance(state, (list, tuple, set)):
            state = ",".join(state)
        q = {
            "limit": limit, "state": state, "flow": flow, "entry": entry,
            "started_from": started_from, "started_to": started_to,
            "updated_from": updated_from, "updated_to": updated_to,
            "fork_of": fork_of, "nested_in": nested_in, "fault": fault,
        }
        if newest:
            q["order"] = "newest"
            q["before"] = before
        else:
            q["after"] = after
        if attrs:
            q["attrs"] = json.dumps(attrs, separators=(",", ":"))
        if counts:
            q["counts"] = "true"
        return self._call("GET", "/v1/runs", query=q)

    def iter_runs(self, state=None, page_size=100, *, newest=False, **filters):
        """Every run the query selects, page by page, following
        ``nextAfter`` (or ``nextBefore`` with ``newest=True``); ``filters``
        are those of :meth:`runs`."""
        cursor = None
        while True:
            if newest:
                page = self.runs(limit=page_size, state=state, newest=True, before=cursor, **filters)
            else:
                page = self.runs(limit=page_size, after=cursor, state=state, **filters)
            yield from page["runs"]
            cursor = page.get("nextBefore" if newest else "nextAfter")
            if not cursor:
                return

    def count_runs(self, state=None, **filters):
        """How many runs the filters select: ``{total, byState, byFlow}``."""
        return self.runs(limit=1, state=state, counts=True, **filters)["counts"]

    def facts(self, run, kind=None, fact=None, search=None, offset=None, limit=None):
        """A page of the run's history."""
        q = {"kind": kind, "fact": fact, "search": search, "offset": offset, "limit": limit}
        return self._call("GET", f"/v1/runs/{self._q(run)}/facts", query=q)

    def open_calls(self, limit=None, after=None, run=None, node=None, tool=None,
                   waiting_ms=None, due_before_ms=None, sort=None):
        """A page of the inbox: open calls of paused runs,
        ``{calls, truncated, next, total, problems}``. Filters combine;
        ``sort`` is ``"age"`` (default) or ``"due"``; pass a page's
        ``next`` as ``after`` for the following page."""
        q = {"state": "open", "limit": limit, "after": after, "run": run, "node": node,
             "tool": tool, "waiting_ms": waiting_ms, "due_before_ms": due_before_ms, "sort": sort}
        return self._call("GET", "/v1/calls", query=q)

    def all_open_calls(self, **filters):
        """Every open call the filters match, following the inbox's cursor."""
        after = None
        while True:
            page = self.open_calls(after=after, **filters)
            yield from page["calls"]
            after = page.get("next")
            if not after:
                return

    def resume(self, run, call=None, reply=None, wait=None):
        """Admits ``reply`` (an outcome such as ``{"Ok": {...}}``) for the
        open ``call`` and drives the run on. With neither, continues a
        halted or crashed run, settling its open Tool calls."""
        body = _body(call=call, reply=reply, wait=wait)
        return self._call("POST", f"/v1/runs/{self._q(run)}/resume", body, timeout=self._wait_timeout(wait))

    def answer(self, run, call, value, wait=None):
        """Answers an open call (a review) with the value ``value``:
        :meth:`resume` with ``{"Ok": value}``."""
        return self.resume(run, call=call, reply={"Ok": value}, wait=wait)

    def halt(self, run):
        """Stops the run's drive and records a halt (no End)."""
        return self._call("POST", f"/v1/runs/{self._q(run)}/halt")

    def replay(self, run):
        """``{run, verdict, fact?, reason?}``: matched, incomplete or
        diverged."""
        return self._call("POST", f"/v1/runs/{self._q(run)}/replay")

    def fork(self, run, checkpoint, set=None, wait=None):
        """A new run from a root Checkpoint (its fact number); ``set``
        replaces state fields."""
        body = _body(checkpoint=checkpoint, set=set, wait=wait)
        return self._call("POST", f"/v1/runs/{self._q(run)}/fork", body, timeout=self._wait_timeout(wait))

    def lineage(self, run):
        """``{run, ancestors, truncated}``: the runs ``run`` came from,
        nearest first — each ``{run, from, kind: "fork" | "nested",
        checkpoint?, recovery?, call?, deleted?}``."""
        return self._call("GET", f"/v1/runs/{self._q(run)}/lineage")

    def source(self, run, module):
        """The recorded source text of a module."""
        conn, resp = self._open("GET", f"/v1/runs/{self._q(run)}/sources/{self._q(module)}")
        try:
            return resp.read().decode("utf-8")
        finally:
            conn.close()

    def blob(self, hash_):
        """A blob's verified bytes (``blake3:<hex>``)."""
        conn, resp = self._open("GET", f"/v1/blobs/{self._q(hash_)}")
        try:
            return resp.read()
        finally:
            conn.close()

    # Archives.

    def export_archive(self, run, path=None):
        """The run archive, a tar stream; written to ``path`` when given,
        else returned as bytes."""
        conn, resp = self._open("GET", f"/v1/runs/{self._q(run)}/archive", headers={"Accept": "application/x-tar"})
        try:
            if path is None:
                return resp.read()
            with open(path, "wb") as f:
                while chunk := resp.read(1 << 16):
                    f.write(chunk)
            return path
        finally:
            conn.close()

    def import_archive(self, archive):
        """Imports a run archive (``bytes`` or a path to a tar file); it is
        verified first and nothing is written unless it verifies.
        Idempotent: ``{run, imported: True, facts}``, or ``{run, imported:
        False}`` when the run is already present. Needs the ``admin``
        scope."""
        if isinstance(archive, (bytes, bytearray)):
            data = bytes(archive)
        else:
            with open(archive, "rb") as f:
                data = f.read()
        conn, resp = self._open("POST", "/v1/archives", data, {"Content-Type": "application/x-tar"})
        try:
            return _loads(resp.read())
        finally:
            conn.close()

    # Feeds.

    def stream_facts(self, run, after=None, retries=5, timeout=60):
        """The run's facts as :class:`Fact` values, backlog first, then live,
        strictly by number, until the End (a paused run's feed stays open:
        stop iterating to leave it). ``after`` starts after that fact
        number. A connection that drops is opened again with
        ``Last-Event-ID``, so no fact is missed or repeated; after
        ``retries`` failed attempts in a row it raises :class:`Unavailable`.
        ``timeout`` bounds a silence (the server sends a keep-alive every
        15 s)."""
        last = after
        failures = 0
        while True:
            headers = {"Accept": "text/event-stream"}
            if last is not None:
                headers["Last-Event-ID"] = str(last)
            try:
                conn, resp = self._open("GET", f"/v1/runs/{self._q(run)}/events", headers=headers, timeout=timeout)
            except Unavailable:
                failures += 1
                if failures > retries:
                    raise
                time.sleep(min(2.0, 0.1 * 2**failures))
                continue
            ended = False
            try:
                for ev in sse.events(_lines(resp)):
                    failures = 0
                    n = int(ev.id)
                    if last is not None and n <= int(last):
                        continue  # never repeat a fact, whatever the server sends
                    last = n
                    yield Fact(n, ev.event, _loads(ev.data))
                    if ev.event == "End":
                        ended = True
                        return
            finally:
                conn.close()
            if not ended:
                # Cut off (or the server shut down): open it again from the
                # last fact received.
                failures += 1
                if failures > retries:
                    raise Unavailable(0, "feed lost", f"the event stream of {run} ended without an End")
                time.sleep(min(2.0, 0.05 * 2**failures))

    def stream_events(self, timeout=60):
        """The server's state feed: ``(event, data)`` pairs such as
        ``("state", {"run": ..., "state": "paused"})``, until the server
        closes it."""
        conn, resp = self._open("GET", "/v1/events", headers={"Accept": "text/event-stream"}, timeout=timeout)
        try:
            for ev in sse.events(_lines(resp)):
                yield ev.event, _loads(ev.data)
        finally:
            conn.close()


def _lines(resp):
    """Raw lines of a streamed response; a connection cut, reset or silent
    past the timeout ends them (the last line then lacks its newline)."""
    while True:
        try:
            line = resp.readline(1 << 24)
        except (OSError, http.client.HTTPException, socket.timeout):
            return
        if not line:
            return
        yield line


def _body(**members):
    """A request body without the members left out (``None``)."""
    return {k: v for k, v in members.items() if v is not None}


__all__ = ["Client", "Fact", "FlowdError"]
