"""Serving the Tool process protocol: describe, call, reply, cancel.

host-boundary.txt, "The Tool process protocol" and "Toolkits":

* describe lists each served declaration by identity, fingerprint and
  signature, exactly as the ``flow tools`` document lists them;
* a call whose args do not decode at the declared types, or that names no
  declaration this process serves, is answered NotRun (the author's code
  never ran);
* the author's code returning a value is Ok; raising :class:`ToolError` with
  the declared error value is Failed; raising anything else, or returning a
  value that is not of the declared type, is Unknown (what it did before it
  stopped is not known); raising :class:`NotRun` says it knows nothing
  happened;
* calls are multiplexed: each runs as its own asyncio task (a plain function
  in a worker thread), replies go out in any order, keyed by (run, call);
* cancel stops an async handler (a thread cannot be stopped: its
  :class:`Call` has ``cancelled`` set and its late result is dropped) and
  answers Unknown, since it proves nothing, or NotRun when the handler had
  not started yet.

Stdout carries protocol lines only: while serving, file descriptor 1 points
at stderr, so ``print`` and any library writing to stdout land in the log.
"""

import asyncio
import concurrent.futures
import functools
import inspect
import logging
import os
import sys
import threading

from . import jsontext, named
from .document import DocumentError, read

DATA_VERSION = "1.0"
MAX_LINE_BYTES = (16 << 20) + (1 << 20)
log = logging.getLogger("flowd_toolkit")
_EVENTS = threading.Lock()


class ToolError(Exception):
    """The declared error: ``raise ToolError(value)`` answers Failed with
    ``value`` encoded at the declaration's error type. For the built-in
    ``std/tool.ToolError`` record a plain message is enough:
    ``raise ToolError("no such key")`` is ``{"message": "no such key"}``."""

    def __init__(self, value):
        super().__init__(value)
        self.value = value


class NotRun(Exception):
    """The handler knows the call definitely did not happen (for example a
    connection refused before anything was sent): answered NotRun."""


class Call:
    """What a handler may ask about its call: declare a parameter annotated
    ``Call`` to receive it."""

    def __init__(self, run, call, tool):
        self.run = run
        self.call = call
        self.tool = tool
        self._cancelled = None
        # Whether the author's code may have started: what cancel answers
        # depends on it.
        self._started = False
        self._future = None

    @property
    def cancelled(self):
        """A ``threading.Event``, set when the host cancels the call."""
        # Made on first use: most calls never look, and an Event is not free.
        with _EVENTS:
            if self._cancelled is None:
                self._cancelled = threading.Event()
            return self._cancelled

    def _may_have_started(self):
        if self._future is not None:
            # A future that can still be cancelled never started.
            return not self._future.cancel()
        return self._started

    def __repr__(self):
        return f"Call(run={self.run!r}, call={self.call!r}, tool={self.tool!r})"


class _Handler:
    def __init__(self, fn, listed, context_param):
        self.fn = fn
        self.listed = listed
        self.context_param = context_param
        self.is_async = inspect.iscoroutinefunction(fn)


def _outcome(tag, text):
    return "{" + jsontext.write_str(tag) + ":" + text + "}"


def reply_line(run, call, outcome_text):
    """The reply notification as one canonical line (keys in code-point
    order: jsonrpc, method, params; call, outcome, run)."""
    return (
        '{"jsonrpc":"2.0","method":"reply","params":{"call":'
        + jsontext.write_str(call)
        + ',"outcome":'
        + outcome_text
        + ',"run":'
        + jsontext.write_str(run)
        + "}}\n"
    )


class Toolkit:
    """A Tool process: declarations from a ``flow tools`` document, a
    handler per served identity, then :meth:`run`::

        tk = Toolkit.from_file("tools.json")

        @tk.tool("kv.json#get")
        def get(key: str) -> str: ...

        tk.run()
    """

    def __init__(self, document):
        """``document``: the ``flow tools`` document as
        :func:`flowd_toolkit.parse` reads it (numbers exact); see
        :meth:`from_file` and :meth:`from_text`."""
        self.declarations, self.types = read(document)
        self._handlers = {}
        self._pool = None

    @classmethod
    def from_text(cls, text):
        try:
            return cls(jsontext.parse(text))
        except jsontext.DecodeError as e:
            raise DocumentError("", str(e)) from None

    @classmethod
    def from_file(cls, path):
        """From the file ``flow tools FLOW.json > tools.json`` wrote."""
        with open(path, "rb") as f:
            return cls.from_text(f.read())

    def type(self, identity):
        """The generated Python class of a declared record or enum."""
        return self.types[identity].cls

    def tool(self, identity):
        """Registers the decorated function as the handler of ``identity``.
        It is called with the declared parameters as keyword arguments (an
        Option parameter holding None as ``None``); a parameter annotated
        :class:`Call` receives the call's context."""

        def register(fn):
            self.handle(identity, fn)
            return fn

        return register

    def handle(self, identity, fn):
        listed = self.declarations.get(identity)
        if listed is None:
            raise KeyError(f"the document does not list {identity}")
        sig = inspect.signature(fn)
        try:
            hints = inspect.signature(fn, eval_str=True).parameters
        except Exception:
            hints = sig.parameters
        declared = {p.name for p in listed.params}
        context_param = None
        takes_kwargs = False
        for name, p in sig.parameters.items():
            ann = hints[name].annotation
            if ann is Call or ann == "Call":
                context_param = name
            elif p.kind is p.VAR_KEYWORD:
                takes_kwargs = True
            elif p.kind in (p.VAR_POSITIONAL, p.POSITIONAL_ONLY):
                raise TypeError(f"{fn.__name__}: parameters are passed by name; {name} cannot be")
            elif name not in declared and p.default is p.empty:
                raise TypeError(f"{fn.__name__} requires {name}, which {identity} does not declare")
        for name in declared:
            if name not in sig.parameters and not takes_kwargs:
                raise TypeError(f"{fn.__name__} does not take {name}, which {identity} declares")
        self._handlers[identity] = _Handler(fn, listed, context_param)

    def describe(self):
        """The describe result: every handled declaration, as listed."""
        return {
            "data": DATA_VERSION,
            "tools": [
                {"fingerprint": h.listed.fingerprint, "signature": h.listed.signature, "tool": t}
                for t, h in sorted(self._handlers.items())
            ],
        }

    async def call(self, run, call, tool, args, context=None):
        """Runs one call and returns its outcome as canonical text
        (``{"Ok":…}``, ``{"Failed":…}``, ``{"NotRun":"…"}``,
        ``{"Unknown":"…"}``). ``args`` is the parsed args object."""
        h = self._handlers.get(tool)
        if h is None:
            return _outcome("NotRun", jsontext.write_str(f"this process serves no declaration {tool}"))
        try:
            kwargs = h.listed.args.decode(args)
        except jsontext.DecodeError as e:
            return _outcome("NotRun", jsontext.write_str(f"args do not decode: {e}"))
        context = context or Call(run, call, tool)
        if h.context_param:
            kwargs[h.context_param] = context
        try:
            if h.is_async:
                context._started = True
                result = await h.fn(**kwargs)
            else:
                context._future = self._executor().submit(functools.partial(h.fn, **kwargs))
                result = await asyncio.wrap_future(context._future)
        except asyncio.CancelledError:
            raise
        except ToolError as e:
            return self._failed(h, e.value)
        except NotRun as e:
            return _outcome("NotRun", jsontext.write_str(str(e) or "the handler did not run the call"))
        except BaseException as e:  # noqa: BLE001 - any other stop is Unknown
            log.warning("%s: %s stopped with %s", tool, call, type(e).__name__, exc_info=e)
            return _outcome(
                "Unknown",
                jsontext.write_str(f"the handler stopped with an undeclared error: {type(e).__name__}: {e}"),
            )
        try:
            text = h.listed.ok.encode(result)
        except jsontext.DecodeError as e:
            return _outcome(
                "Unknown",
                jsontext.write_str(f"the handler's result is not of the declared success type: {e}"),
            )
        return _outcome("Ok", text)

    def _failed(self, h, value):
        err = h.listed.err
        if (
            isinstance(value, str)
            and isinstance(err, named.NamedType)
            and err.decl.identity == "std/tool.ToolError"
        ):
            value = {"message": value}
        try:
            return _outcome("Failed", err.encode(value))
        except jsontext.DecodeError as e:
            return _outcome(
                "Unknown",
                jsontext.write_str(f"the handler stopped with an error that is not the declared one: {e}"),
            )

    def _executor(self):
        if self._pool is None:
            # As many threads as the host keeps calls outstanding by default.
            self._pool = concurrent.futures.ThreadPoolExecutor(64, thread_name_prefix="flowd-tool")
        return self._pool

    def run(self):
        """Serves the protocol on stdin and stdout until stdin ends."""
        out_fd = os.dup(1)
        os.dup2(2, 1)  # stdout discipline: fd 1 is the log from here on
        sys.stdout = sys.stderr
        if not logging.getLogger().handlers:
            logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(name)s: %(message)s")
        with os.fdopen(out_fd, "wb", buffering=0) as out:
            asyncio.run(self.serve(sys.stdin.buffer, out))

    async def serve(self, reader, writer):
        """Serves lines read from the binary file ``reader`` and writes
        lines to the binary file ``writer``, until ``reader`` ends; calls
        still running then finish and are answered first."""
        loop = asyncio.get_running_loop()
        lines = asyncio.Queue()

        def read_lines():
            # Lines go to the loop a chunk at a time: one wake-up per read,
            # not per line.
            pending, skipping = b"", False
            try:
                while True:
                    chunk = reader.read1(1 << 16)
                    if not chunk:
                        break
                    parts = (pending + chunk).split(b"\n")
                    pending = parts.pop()
                    if skipping and parts:
                        parts.pop(0)  # the end of the line being dropped
                        skipping = False
                    if len(pending) > MAX_LINE_BYTES:
                        log.warning("dropped a line longer than %d bytes", MAX_LINE_BYTES)
                        pending, skipping = b"", True
                    if parts:
                        loop.call_soon_threadsafe(lines.put_nowait, parts)
            finally:
                if pending and not skipping:
                    loop.call_soon_threadsafe(lines.put_nowait, [pending])
                loop.call_soon_threadsafe(lines.put_nowait, None)

        threading.Thread(target=read_lines, name="flowd-stdin", daemon=True).start()
        running = {}
        out = []

        def flush():
            data = "".join(out).encode("utf-8")
            out.clear()
            writer.write(data)
            writer.flush()

        def send(text):
            # Replies written in one turn of the loop go out in one write.
            if not out:
                loop.call_soon(flush)
            out.append(text)

        async def one(key, ctx, tool, args):
            try:
                outcome = await self.call(key[0], key[1], tool, args, ctx)
            except asyncio.CancelledError:
                return
            if running.pop(key, None) is not None:
                send(reply_line(key[0], key[1], outcome))

        while True:
            batch = await lines.get()
            if batch is None:
                break
            for line in batch:
                self._dispatch(line, running, send, one)
        tasks = [t for t, _ in running.values()]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if out:
            flush()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _dispatch(self, line, running, send, one):
        """One line from the host."""
        if not line.strip():
            return
        try:
            msg = jsontext.parse(line)
        except jsontext.DecodeError as e:
            log.warning("ignored a line that is not JSON: %s", e)
            return
        method = msg.get("method") if isinstance(msg, dict) else None
        if method == "describe":
            rid = msg.get("id")
            if not isinstance(rid, (str, jsontext.Num)):
                rid = None
            send(jsontext.canonical({"id": rid, "jsonrpc": "2.0", "result": self.describe()}) + "\n")
        elif method == "call":
            p = msg.get("params")
            run = p.get("run") if isinstance(p, dict) else None
            cid = p.get("call") if isinstance(p, dict) else None
            if not isinstance(run, str) or not isinstance(cid, str):
                log.warning("ignored a call without run and call ids")
                return
            key = (run, cid)
            if key in running:
                log.warning("call %s of run %s is already running; ignored", cid, run)
                return
            tool, args = p.get("tool"), p.get("args")
            problem = None
            if not isinstance(tool, str) or not isinstance(args, dict):
                problem = "a call has a tool (a string) and args (an object)"
            elif "schema" in p or "types" in p:
                problem = f"{tool} is not generic: its calls carry no schema or types"
            if problem:
                send(reply_line(run, cid, _outcome("NotRun", jsontext.write_str(problem))))
                return
            ctx = Call(run, cid, tool)
            running[key] = (asyncio.ensure_future(one(key, ctx, tool, args)), ctx)
        elif method == "cancel":
            p = msg.get("params") if isinstance(msg.get("params"), dict) else {}
            key = (p.get("run"), p.get("call"))
            entry = running.pop(key, None)
            if entry is not None:
                task, ctx = entry
                ctx.cancelled.set()
                started = ctx._may_have_started()
                task.cancel()
                if started:
                    outcome = _outcome("Unknown", '"cancelled while running"')
                else:
                    outcome = _outcome("NotRun", '"cancelled before the handler started"')
                send(reply_line(key[0], key[1], outcome))
        else:
            log.warning("ignored a message a host does not send")
