"""The outcome rules and the runtime, over real pipes to a real child
process (fixtures/kit_tools.py) (TKT-4, TKT-5, TKT-6, TKT-12; PRO-15,
PRO-17, PRO-18): describe answers the document's own fingerprints, NotRun
when args do not decode or no declaration is served, Unknown for an
undeclared error or a result of the wrong type, Failed for ToolError,
concurrent calls answered in any order, cancel, and stdout discipline."""

import json
import os
import queue
import subprocess
import sys
import threading
import time

import pytest

from flowd_toolkit import Toolkit, jsontext

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures")
DOC = os.path.join(FIXTURES, "tools.json")


class Proc:
    """The fixture Tool process, with its stdout read line by line."""

    def __init__(self):
        self.p = subprocess.Popen(
            [sys.executable, os.path.join(FIXTURES, "kit_tools.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines = queue.Queue()
        self.stderr = []
        self.replies = {}
        threading.Thread(target=self._read, args=(self.p.stdout, self.lines.put), daemon=True).start()
        threading.Thread(target=self._read, args=(self.p.stderr, self.stderr.append), daemon=True).start()

    @staticmethod
    def _read(f, put):
        for line in f:
            put(line)
        put(None)

    def send(self, msg):
        self.p.stdin.write((json.dumps(msg) + "\n").encode())
        self.p.stdin.flush()

    def call(self, call, tool, args, run="r1", **extra):
        self.send({"jsonrpc": "2.0", "method": "call",
                   "params": {"run": run, "call": call, "tool": tool, "args": args, **extra}})

    def next_line(self, timeout=10):
        line = self.lines.get(timeout=timeout)
        assert line is not None, "the process ended: " + b"".join(self.stderr).decode()
        return line

    def reply(self, call, run="r1", timeout=10):
        """The outcome of (run, call); every line on stdout must be a
        canonical protocol message."""
        deadline = time.monotonic() + timeout
        while (run, call) not in self.replies:
            line = self.next_line(max(0.01, deadline - time.monotonic()))
            text = line.decode()
            msg = jsontext.parse(text)
            assert jsontext.canonical(msg) + "\n" == text, "not canonical"
            assert msg["method"] == "reply", text
            p = msg["params"]
            key = (p["run"], p["call"])
            assert key not in self.replies, f"second reply for {key}"
            self.replies[key] = json.loads(text)["params"]["outcome"]
        return self.replies[(run, call)]

    def wait_stderr(self, text, timeout=10):
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.stderr if line):
            assert time.monotonic() < deadline, f"no {text!r} on stderr: {self.stderr}"
            time.sleep(0.01)

    def close(self):
        self.p.stdin.close()
        try:
            self.p.wait(10)
        finally:
            if self.p.poll() is None:
                self.p.kill()
                self.p.wait()


@pytest.fixture
def proc():
    p = Proc()
    yield p
    p.close()


def test_describe_answers_the_documents_fingerprints(proc):
    proc.send({"jsonrpc": "2.0", "id": 7, "method": "describe"})
    line = proc.next_line().decode()
    msg = json.loads(line)
    assert msg["id"] == 7 and msg["jsonrpc"] == "2.0"
    assert msg["result"]["data"] == "1.0"
    with open(DOC) as f:
        doc = json.load(f)
    listed = {t["tool"]: t for t in doc["programs"][0]["tools"]}
    served = {t["tool"]: t for t in msg["result"]["tools"]}
    # Every handled declaration, none that is not handled.
    assert set(served) == set(listed) - {"kit.json#unserved"}
    for name, t in served.items():
        assert t == {k: listed[name][k] for k in ("tool", "fingerprint", "signature")}


def test_ok_failed_unknown_notrun(proc):
    proc.call("c1", "kit.json#add", {"a": 2, "b": 40})
    proc.call("c2", "kit.json#fail", {"key": "k"})
    proc.call("c3", "kit.json#crash", {"key": "k"})
    proc.call("c4", "kit.json#wrong", {"key": "k"})
    proc.call("c5", "kit.json#refuse", {"key": "k"})
    proc.call("c6", "kit.json#unserved", {"key": "k"})
    proc.call("c7", "kit.json#nothing", {})
    proc.call("c8", "kit.json#add", {"a": 1.5, "b": 1})
    proc.call("c9", "kit.json#add", {"a": "1", "b": 1})
    proc.call("c10", "kit.json#add", {"a": 1})
    proc.call("c11", "kit.json#add", {"a": 1e3, "b": 10.0})
    proc.call("c12", "kit.json#add", {"a": 1, "b": 2}, schema={}, types={})
    assert proc.reply("c1") == {"Ok": 42}
    assert proc.reply("c2") == {"Failed": {"message": "no value for k"}}
    assert proc.reply("c3") == {"Unknown": "the handler stopped with an undeclared error: ValueError: boom on k"}
    assert "not of the declared success type" in proc.reply("c4")["Unknown"]
    assert proc.reply("c5") == {"NotRun": "refused before doing anything"}
    assert proc.reply("c6") == {"NotRun": "this process serves no declaration kit.json#unserved"}
    assert proc.reply("c7") == {"NotRun": "this process serves no declaration kit.json#nothing"}
    # Decoding never coerces: 1.5 is no Int, "1" is no Int, a missing
    # parameter is not filled in; 1e3 and 10.0 are Ints by value.
    assert proc.reply("c8")["NotRun"].startswith("args do not decode: $.a: expected Int")
    assert proc.reply("c9")["NotRun"] == 'args do not decode: $.a: expected Int, found string "1"'
    assert "missing required field" in proc.reply("c10")["NotRun"]
    assert proc.reply("c11") == {"Ok": 1010}
    assert "not generic" in proc.reply("c12")["NotRun"]


def test_echo_round_trips_every_type(proc):
    args = {
        "n": 12345678901234567890123, "price": 1.50, "name": "é\u0001\"", "when": "2026-01-01T00:00:00.000000001+01:00",
        "span": "P1DT1M", "blob": "aGk=", "tags": ["b", "a"], "scores": {"z": 1, "a": 2},
        "pair": [1, "x"], "level": "high", "shape": {"circle": 2.50}, "note": "n", "extra": {"y": [1e2, None]},
    }
    proc.call("e1", "kit.json#echo", args)
    assert proc.reply("e1") == {"Ok": {
        "n": 12345678901234567890123, "price": 1.5, "name": "é\u0001\"", "when": "2025-12-31T23:00:00.000000001Z",
        "span": "PT86460S", "blob": "aGk=", "tags": ["a", "b"], "scores": {"a": 2, "z": 1},
        "pair": [1, "x"], "level": "high", "shape": {"circle": 2.5}, "note": "n", "extra": {"y": [100, None]},
    }}
    bad = dict(args, tags=["a", "a"])
    proc.call("e2", "kit.json#echo", bad)
    assert "duplicate element in a set" in proc.reply("e2")["NotRun"]
    proc.call("e3", "kit.json#echo", dict(args, blob="aGk"))
    assert "base64" in proc.reply("e3")["NotRun"]
    proc.call("e4", "kit.json#echo", dict(args, level="medium"))
    assert "not a constructor" in proc.reply("e4")["NotRun"]
    proc.call("e5", "kit.json#echo", dict(args, when="2026-01-01T00:00:00"))
    assert "expected Instant" in proc.reply("e5")["NotRun"]


def test_option_params_absent_or_some(proc):
    proc.call("o1", "kit.json#maybe", {"key": "k"})
    proc.call("o2", "kit.json#maybe", {"key": "k", "hint": "h", "raw": None})
    assert proc.reply("o1") == {"Ok": {"key": "k", "hint": None, "raw": "absent"}}
    assert proc.reply("o2") == {"Ok": {"key": "k", "hint": "h", "raw": {"given": None}}}


def test_calls_run_concurrently_and_reply_in_any_order(proc):
    start = time.monotonic()
    proc.call("s1", "kit.json#slow", {"ms": 1500})
    proc.call("s2", "kit.json#slow_sync", {"ms": 1500})
    proc.call("s3", "kit.json#add", {"a": 1, "b": 1})
    # The same call id in another run is another call.
    proc.call("s3", "kit.json#add", {"a": 2, "b": 2}, run="r2")
    assert proc.reply("s3") == {"Ok": 2}
    assert proc.reply("s3", run="r2") == {"Ok": 4}
    assert proc.reply("s1", timeout=20) == {"Ok": 1500}
    assert proc.reply("s2", timeout=20) == {"Ok": 1500}
    # One after the other would take 3 s at least.
    assert "s3" in {c for _, c in list(proc.replies)[:2]}
    assert time.monotonic() - start < 20


def test_cancel_answers_unknown_once(proc):
    proc.call("k1", "kit.json#slow", {"ms": 60000})
    proc.call("k2", "kit.json#slow_sync", {"ms": 60000})
    proc.wait_stderr(b"k2 started")
    for c in ("k1", "k2"):
        proc.send({"jsonrpc": "2.0", "method": "cancel", "params": {"run": "r1", "call": c}})
    assert proc.reply("k1") == {"Unknown": "cancelled while running"}
    assert proc.reply("k2") == {"Unknown": "cancelled while running"}
    # A cancel for a call that is not open changes nothing; the process
    # goes on, and the thread's late result is dropped (reply() would see a
    # second reply).
    proc.send({"jsonrpc": "2.0", "method": "cancel", "params": {"run": "r1", "call": "nope"}})
    proc.call("k3", "kit.json#add", {"a": 1, "b": 2})
    assert proc.reply("k3") == {"Ok": 3}
    proc.wait_stderr(b"k2 saw its cancel")


def test_stdout_carries_protocol_lines_only(proc):
    proc.send({"jsonrpc": "2.0", "method": "call", "params": "garbage"})
    proc.p.stdin.write(b"not json at all\n")
    proc.call("n1", "kit.json#noisy", {"key": "k"})
    assert proc.reply("n1") == {"Ok": "k"}
    proc.close()
    err = b"".join(line for line in proc.stderr if line)
    assert b"print goes to stderr" in err and b"raw write to fd 1" in err
    assert b"not JSON" in err
    assert proc.lines.get(timeout=5) is None, "nothing else on stdout"


def test_input_end_lets_running_calls_finish(proc):
    proc.call("f1", "kit.json#slow", {"ms": 300})
    proc.p.stdin.close()
    assert proc.reply("f1") == {"Ok": 300}
    assert proc.p.wait(10) == 0


def test_in_process_call_and_registration_checks():
    import asyncio

    tk = Toolkit.from_file(DOC)
    with pytest.raises(TypeError, match="does not take b"):
        tk.handle("kit.json#add", lambda a: a)
    with pytest.raises(TypeError, match="requires c"):
        tk.handle("kit.json#add", lambda a, b, c: a)
    with pytest.raises(KeyError):
        tk.handle("kit.json#missing", lambda: None)
    tk.handle("kit.json#add", lambda **kw: kw["a"] * kw["b"])
    out = asyncio.run(tk.call("r", "c", "kit.json#add", jsontext.parse('{"a":6,"b":7}')))
    assert out == '{"Ok":42}'


def test_document_refusals():
    from flowd_toolkit import DocumentError

    with open(DOC) as f:
        good = f.read()
    for bad, where in [
        (good.replace('"data":"1.0"', '"data":"2.0"', 1), "/data"),
        (good.replace('"kind":"enum"', '"kind":"host"', 1), "/kind"),
        (good.replace('"type":"Int"', '"type":"Integer"', 1), "/type"),
        (good.replace('"generic":[]', '"generic":["T"]', 1), "/generic"),
        (good.replace('"Named":"std/tool.ToolError"', '"Named":"std/tool.Nope"', 1), "/err/Named"),
    ]:
        assert bad != good
        with pytest.raises(DocumentError) as e:
            Toolkit.from_text(bad)
        assert where in e.value.pointer, e.value


def test_cancel_before_the_handler_started_is_notrun(proc):
    # 64 worker threads: the 65th sync call waits in the queue, so its
    # cancel provably comes before the handler started.
    for i in range(65):
        proc.call(f"q{i}", "kit.json#slow_sync", {"ms": 60000})
    for i in range(64):
        proc.wait_stderr(f"q{i} started".encode())
    proc.send({"jsonrpc": "2.0", "method": "cancel", "params": {"run": "r1", "call": "q64"}})
    assert proc.reply("q64") == {"NotRun": "cancelled before the handler started"}
    for i in range(64):
        proc.send({"jsonrpc": "2.0", "method": "cancel", "params": {"run": "r1", "call": f"q{i}"}})
    for i in range(64):
        assert proc.reply(f"q{i}") == {"Unknown": "cancelled while running"}
