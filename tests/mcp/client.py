"""The MCP tests' client side, on the official Python `mcp` SDK (pinned in
.ci/run): connects to `flow mcp` over stdio or to `/mcp` on `flow serve`,
and checks what the tools answer. Run by tests/mcp.rs; a failed
check raises, so the script exits non-zero naming it."""
import argparse
import asyncio
import contextlib
import json
import os
import sys

from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
REVIEW = os.path.join(REPO, "examples", "flows", "review", "review.json")
SLOW = os.path.join(HERE, "slow", "slow.json")
META_KEYS = {"ng.flowla/request", "ng.flowla/run", "ng.flowla/fact", "ng.flowla/hash"}


def check(cond, what, detail=None):
    if not cond:
        raise AssertionError(what + ("" if detail is None else f": {detail!r}"))


def load(path):
    with open(path) as f:
        return json.load(f)


class Target:
    """Where the server is: `flow mcp` (stdio) or a URL (HTTP)."""

    def __init__(self, args):
        self.flow_bin = args.flow
        self.data = args.data
        self.url = args.url
        self.token = args.token
        self.mcp_args = args.mcp_arg or []

    @property
    def stdio(self):
        return self.url is None

    def client(self, handler=None, mcp_args=None, token=None):
        """A connected-on-enter client; `mcp_args` replaces `flow mcp`'s
        flags, `token` the bearer token."""
        if self.stdio:
            args = ["--data", self.data, "mcp", *(self.mcp_args if mcp_args is None else mcp_args)]
            server = StdioServerParameters(command=self.flow_bin, args=args, cwd=REPO)
        else:
            token = self.token if token is None else token
            headers = {"Authorization": f"Bearer {token}"} if token else None
            http = create_mcp_http_client(headers=headers)
            server = streamable_http_client(self.url, http_client=http)
        return Client(server, message_handler=handler)

    def program(self, path, name):
        """A program argument: a path over stdio (as `flow run FILE`),
        the document over HTTP (the server reads no files)."""
        if self.stdio:
            return {"path": path}
        return {"flow": load(path), "name": name}


async def ok(c, tool, args, **kw):
    r = await c.call_tool(tool, args, **kw)
    check(not r.is_error, f"{tool} answered", r.structured_content)
    return r.structured_content


async def refused(c, tool, args, words):
    r = await c.call_tool(tool, args)
    check(r.is_error, f"{tool} {args} is refused", r.structured_content)
    msg = r.structured_content["message"]
    check(words in msg, f"{tool} refusal says {words!r}", msg)
    return r.structured_content


async def history(c, run, **kw):
    return await ok(c, "history", {"run": run, **kw})


def progress_notes(seen):
    return [m for m in seen if type(m).__name__ == "ProgressNotification"]


# --- scenarios ---------------------------------------------------------------


async def every_tool(t):
    """MCPS-1: each of the six tools, with the CLI's meaning; a paused run
    resumed through MCP (RES)."""
    async with t.client() as c:
        names = sorted(x.name for x in (await c.list_tools()).tools)
        check(names == ["check", "history", "replay", "resume", "run", "runs"], "six tools", names)
        review = t.program(REVIEW, "review.json")
        v = await ok(c, "check", review)
        check(v == {"diagnostics": [], "errors": 0, "ok": True}, "review checks", v)
        bad = {"flow": {"spec_version": "1.0.0", "nodes": "no"}}
        v = await ok(c, "check", bad)
        check(v["ok"] is False and v["errors"] > 0 and v["diagnostics"], "a bad flow has diagnostics", v)
        v = await ok(c, "run", {**review, "input": {"text": "ship it"}})
        check(v["state"] == "paused", "review pauses", v)
        run = v["run"]
        pending = v["pending"]
        check(len(pending) == 1 and pending[0]["tool"] == "std/human#input", "one pending call", pending)
        call = pending[0]["call"]
        # A reply that does not fit the call's type is refused; nothing is recorded.
        before = (await history(c, run))["page"]["factsTotal"]
        await refused(c, "resume", {"run": run, "call": call, "reply": {"Ok": {"decision": "maybe"}}}, "does not fit")
        await refused(c, "resume", {"run": run, "call": call}, "both call and reply")
        await refused(c, "resume", {"run": run, "call": "c9:root#9", "reply": {"Ok": {}}}, "not open")
        check((await history(c, run))["page"]["factsTotal"] == before, "refusals record nothing")
        v = await ok(c, "replay", {"run": run})
        check(v == {"run": run, "verdict": "incomplete"}, "a paused run replays incomplete", v)
        v = await ok(c, "resume", {"run": run, "call": call, "reply": {"Ok": {"decision": "approved"}}})
        check(v["state"] == "completed" and v["exit"] == "success", "resumed to the end", v)
        check(v["output"]["review"] == {"decision": "approved"}, "the reply reached the program", v)
        await refused(c, "resume", {"run": run}, "has ended")
        v = await ok(c, "replay", {"run": run})
        check(v == {"run": run, "verdict": "matched"}, "replays matched", v)
        h = await history(c, run)
        kinds = [f["kind"] for f in h["facts"]]
        check(kinds[0] == "Start" and kinds[-1] == "End" and "Reply" in kinds, "history", kinds)
        check(h["run"] == run and h["state"] == "completed" and h["truncated"] is False, "identity and state", h)
        reply = next(f for f in h["facts"] if f["kind"] == "Reply")
        check(reply["call"] == call, "call identity as data", reply)
        src = h["sources"]
        check([s["module"] for s in src] == ["review.json"] and src[0]["available"], "sources", src)
        check(src[0]["hash"].startswith("blake3:") and src[0]["length"] > 0 and "commit" in src[0], "source fields", src)
        v = await ok(c, "runs", {})
        rows = [r for r in v["runs"] if r["run"] == run]
        check(len(rows) == 1, "discovery finds the run", v)
        row = rows[0]
        fields = {"run", "historyPresent", "record", "truncated", "ending", "entry", "program",
                  "lastFact", "hostDecision", "problem"}
        check(set(row) == fields, "discovery row fields", sorted(row))
        check(row["record"] == "complete" and row["ending"] == "completed", "row record", row)
        check(row["lastFact"]["n"] == h["page"]["factsTotal"], "lastFact", row)
        check(set(v) == {"runs", "nextAfter", "problems"}, "discovery result", sorted(v))
        # The run query's filters (issue 38 item 1): the same shape and row
        # fields, only the runs that match.
        q = await ok(c, "runs", {"flow": "review-flow", "state": "completed,faulted", "started_from": 1})
        check([r["run"] for r in q["runs"] if r["run"] == run] == [run], "filtered runs find the run", q)
        check(all(set(r) == fields for r in q["runs"]), "filtered row fields", q)
        check(set(q) == {"runs", "nextAfter", "problems"}, "filtered result", sorted(q))
        none = await ok(c, "runs", {"flow": "no-such-flow"})
        check(none["runs"] == [] and none["nextAfter"] is None, "no match", none)
        await refused(c, "runs", {"state": "sleepy"}, "not one of")
        await refused(c, "replay", {"run": "run-nope"}, "no run")
        await refused(c, "history", {"run": "run-01m8rm3c2x72a1ep2ymfwssye0"}, "no run")


async def bounds(t):
    """HIST-12..21, DISC-4..5: the history and discovery bounds, exactly."""
    async with t.client() as c:
        # Fact text: "Checkpoint <node>" for a node id of 1014 characters is
        # 1025 code points, cut to 1024; the 1013 one (1024) is whole.
        long_in, long_out = "s" + "x" * 1013, "o" + "y" * 1012
        flow = {
            "spec_version": "1.0.0", "id": "bounds", "name": "Bounds",
            "state_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
            "nodes": [
                {"id": long_in, "type": "input", "output_schema": {"text": {"type": "string"}}},
                {"id": long_out, "type": "output", "exit_code": "success"},
            ],
            "edges": [{"type": "direct", "from": long_in, "to": long_out}],
        }
        # A Start input of 4097 bytes of canonical JSON is omitted whole;
        # one of 4096 is shown (`{"text":""}` is 11 bytes).
        runs = {}
        for size in (4096, 4097):
            v = await ok(c, "run", {"flow": flow, "name": "bounds.json", "input": {"text": "z" * (size - 11)}})
            check(v["state"] == "completed", "bounds flow completes", v)
            runs[size] = v["run"]
        h = await history(c, runs[4097], kind="Checkpoint")
        texts = {f["fact"]["node"][:1]: f for f in h["facts"]}
        cut, whole = texts["s"], texts["o"]
        check(cut["saysTruncated"] is True and len(cut["text"]) == 1024, "1025 code points cut to 1024", len(cut["text"]))
        check(cut["text"] == ("Checkpoint " + long_in)[:1024], "the text is the first 1024 code points")
        check(whole["saysTruncated"] is False and len(whole["text"]) == 1024, "1024 code points whole", len(whole["text"]))
        big = (await history(c, runs[4097], kind="Start"))["facts"][0]
        check(big["valuesOmitted"] is True, "a 4097-byte value is omitted", big)
        ref = big["fact"]["input"]
        # Left in stored form: its text is a blob reference, hash and
        # length visible, never the 4086 characters.
        check(ref["text"]["$blob"].startswith("blake3:") and ref["text"]["length"] == 4088,
              "an omitted value keeps its hash visible", ref)
        small = (await history(c, runs[4096], kind="Start"))["facts"][0]
        check(small["valuesOmitted"] is False and small["fact"]["input"] == {"text": "z" * 4085}, "a 4096-byte value is shown")
        # Filtering precedes paging; numbers keep their positions.
        all_facts = (await history(c, runs[4096]))["facts"]
        cps = [f["n"] for f in all_facts if f["kind"] == "Checkpoint"]
        p = await history(c, runs[4096], kind="Checkpoint", offset=1, limit=1)
        check([f["n"] for f in p["facts"]] == cps[1:2], "kind then offset and limit; original numbers", p["facts"])
        check(p["page"] == {"total": len(cps), "factsTotal": len(all_facts), "offset": 1, "limit": 1,
                            "nextOffset": 2 if len(cps) > 2 else None}, "page", p["page"])
        end = await history(c, runs[4096], offset=len(all_facts) - 1)
        check(end["page"]["nextOffset"] is None and end["page"]["limit"] == 50, "nextOffset null at the end; default limit", end["page"])
        # Limits 0 and 201, a bad kind, an offset past the end, bad sources.
        run = runs[4096]
        for lim in (0, 201):
            await refused(c, "history", {"run": run, "limit": lim}, "limit must be from 1 to 200")
            await refused(c, "runs", {"limit": lim}, "limit must be from 1 to 200")
        await refused(c, "history", {"run": run, "limit": -3}, "limit must be from 1 to 200")
        await refused(c, "history", {"run": run, "kind": "Nope"}, "unknown fact kind")
        await refused(c, "history", {"run": run, "offset": 999}, "past the")
        await refused(c, "history", {"run": run, "source": "nope.json"}, "recorded no source module")
        await refused(c, "history", {"run": run, "source_offset": 3}, "give source too")
        await refused(c, "runs", {"after": "not-a-run"}, "")
        for lim in (1, 200):
            v = await ok(c, "runs", {"limit": lim})
            check(len(v["runs"]) <= lim, f"runs limit {lim}", v)
        # A recorded source, paged by 4096 code points.
        s = (await history(c, run))["sources"][0]
        check(s["module"] == "bounds.json", "the source is listed", s)
        first = (await history(c, run, source="bounds.json"))["source"]
        check(len(first["text"]) == 4096 and first["nextOffset"] == 4096 and first["offset"] == 0, "first source page", first["nextOffset"])
        rest = (await history(c, run, source="bounds.json", source_offset=4096))["source"]
        check(rest["nextOffset"] is None and len(first["text"]) + len(rest["text"]) == s["length"], "last source page")
        check(first["hash"] == s["hash"], "the page names the recorded hash")
        await refused(c, "history", {"run": run, "source": "bounds.json", "source_offset": s["length"] + 1}, "past its")
        # Discovery pages by id: nextAfter names the last examined id.
        v = await ok(c, "runs", {"limit": 1})
        check(len(v["runs"]) == 1 and v["nextAfter"] == v["runs"][0]["run"], "nextAfter", v)
        w = await ok(c, "runs", {"limit": 200, "after": v["nextAfter"]})
        check(all(r["run"] > v["nextAfter"] for r in w["runs"]), "after excludes earlier ids", w)


async def progress(t):
    """MCPS-5..7, MCPS-12: one progress notification for a run request with
    a token, after Start is accepted, with exactly the four `_meta` fields;
    none for resume, replay, history, runs, or a run without a token."""
    seen = []

    async def handler(m):
        seen.append(m)

    async def on_progress(p, total, message):
        pass

    async with t.client(handler=handler) as c:
        review = t.program(REVIEW, "review.json")
        v = await ok(c, "run", {**review, "input": {"text": "progress"}}, progress_callback=on_progress)
        await asyncio.sleep(0.3)
        notes = progress_notes(seen)
        check(len(notes) == 1, "one notification for the run", notes)
        p = notes[0].params.model_dump(by_alias=True, mode="json")
        run = v["run"]
        meta = p["_meta"]
        check(set(meta) == META_KEYS, "exactly the four _meta fields", meta)
        # This SDK uses the request's id as its progress token, so the
        # original typed request id is the token, a JSON number.
        check(type(meta["ng.flowla/request"]) is int and meta["ng.flowla/request"] == p["progressToken"],
              "ng.flowla/request is the typed request id", meta)
        start = (await history(c, run, kind="Start"))["facts"][0]
        check(meta["ng.flowla/run"] == run, "ng.flowla/run", meta)
        check(meta["ng.flowla/fact"] == "1" and meta["ng.flowla/fact"] == str(start["n"]), "ng.flowla/fact, a decimal string", meta)
        check(meta["ng.flowla/hash"] == start["hash"], "ng.flowla/hash is Start's recorded hash", meta)
        check(p["progress"] == 1 and run in p["message"], "progress 1, a message naming the run", p)
        seen.clear()
        call = v["pending"][0]["call"]
        await ok(c, "resume", {"run": run, "call": call, "reply": {"Ok": {"decision": "rejected"}}}, progress_callback=on_progress)
        await ok(c, "replay", {"run": run}, progress_callback=on_progress)
        await ok(c, "history", {"run": run}, progress_callback=on_progress)
        await ok(c, "runs", {}, progress_callback=on_progress)
        await ok(c, "run", {**review, "input": {"text": "no token"}})
        await asyncio.sleep(0.3)
        check(progress_notes(seen) == [], "no other notification", progress_notes(seen))


async def wait_for(pred, what, tries=300):
    for _ in range(tries):
        v = await pred()
        if v:
            return v
        await asyncio.sleep(0.1)
    raise AssertionError("timed out waiting for " + what)


async def cancel(t):
    """MCPS-2, MCPS-3: while a long run drives, other requests are answered;
    cancelling the run request halts it (no End), and a resume with the run
    id alone continues it as a crashed run."""
    seen = []

    async def handler(m):
        seen.append(m)

    async def on_progress(p, total, message):
        pass

    async with t.client(handler=handler) as c:
        slow = t.program(SLOW, "slow.json")
        task = asyncio.create_task(
            c.call_tool("run", {**slow, "input": {"ms": 600000}}, progress_callback=on_progress))
        async def accepted():
            return progress_notes(seen)
        notes = await wait_for(accepted, "the accepted Start")
        run = notes[0].params.model_dump(by_alias=True)["_meta"]["ng.flowla/run"]

        async def call_out():
            return (await history(c, run, kind="Call"))["page"]["total"] == 1
        await wait_for(call_out, "the Call to be recorded")
        # Other requests are answered while the run drives (it is still going).
        quick = await ok(c, "run", {**slow, "input": {"ms": 1}})
        check(quick["state"] == "completed" and quick["output"]["waited"] == 1, "a second run completes meanwhile", quick)
        check((await history(c, run))["state"] == "running", "the long run is still running")
        await ok(c, "check", slow)
        await ok(c, "runs", {})
        check(not task.done(), "the long run has not answered")
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

        async def halted():
            return (await history(c, run))["state"] == "halted"
        await wait_for(halted, "the run to be halted")
        h = await history(c, run)
        kinds = [f["kind"] for f in h["facts"]]
        check("End" not in kinds and kinds[-1] == "Call", "a halted run has no End", kinds)
        v = await ok(c, "runs", {})
        row = next(r for r in v["runs"] if r["run"] == run)
        check(row["record"] == "incomplete" and row["hostDecision"]["kind"] == "halt", "discovery shows the halt", row)
        v = await ok(c, "replay", {"run": run})
        check(v["verdict"] == "incomplete", "replays incomplete", v)
        # Resumed like a crashed run: the open call is settled Unknown, its
        # reason the halt (no host restarted).
        v = await ok(c, "resume", {"run": run})
        check(v["state"] == "faulted" and "halted" in v["fault"], "settled as after a halt", v)
        reply = next(f for f in (await history(c, run, kind="Reply"))["facts"])
        check(reply["fact"]["outcome"] == {"Unknown": "halted"}, "Reply Unknown(halted)", reply)
        v = await ok(c, "replay", {"run": run})
        check(v["verdict"] == "matched", "replays matched after resume", v)


async def approval(t):
    """APR-6: flow mcp never asks; without --allow a run that would start a
    flow.toml command is refused and records nothing; --allow or --tools
    approve it."""
    slow = {"path": SLOW, "input": {"ms": 1}}
    async with t.client(mcp_args=[]) as c:
        r = await refused(c, "run", slow, "--allow")
        check(r["error"] == "refused", "refused", r)
        check((await ok(c, "runs", {}))["runs"] == [], "a refused run records nothing")
        # A program whose Tools are all the host's own needs no approval.
        v = await ok(c, "run", {"path": REVIEW, "input": {"text": "x"}})
        check(v["state"] == "paused", "review needs no approval", v)
        # Its resume is a live continuation, refused the same way for slow.
    async with t.client(mcp_args=["--tools", os.path.join(HERE, "slow", "flow.toml")]) as c:
        v = await ok(c, "run", slow)
        check(v["state"] == "completed", "--tools approves its bindings", v)
    async with t.client(mcp_args=["--allow"]) as c:
        v = await ok(c, "run", slow)
        check(v["state"] == "completed", "--allow approves flow.toml", v)
    async with t.client(mcp_args=[]) as c:
        await refused(c, "run", {"flow": load(SLOW), "name": "slow.json", "input": {"ms": 1}}, "no binding")


async def scopes(t, read_token, run_token):
    """A read token may check, read history, list runs and replay; run and
    resume need scope run. No token is refused by the server."""
    review = t.program(REVIEW, "review.json")
    async with t.client(token=read_token) as c:
        await ok(c, "check", review)
        await ok(c, "runs", {})
        r = await refused(c, "run", {**review, "input": {"text": "x"}}, "needs scope run")
        check(r["error"] == "forbidden", "forbidden", r)
        await refused(c, "resume", {"run": "run-01m8rm3c2x72a1ep2ymfwssye0"}, "needs scope run")
    async with t.client(token=run_token) as c:
        v = await ok(c, "run", {**review, "input": {"text": "x"}})
        check(v["state"] == "paused", "a run token runs", v)
        await ok(c, "replay", {"run": v["run"]})
    # Without a token the server answers 401 before MCP sees the request.
    import httpx2
    async with httpx2.AsyncClient() as h:
        r = await h.post(t.url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                         headers={"Accept": "application/json, text/event-stream"})
    check(r.status_code == 401, "a request without a token is 401", r.status_code)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario")
    ap.add_argument("--flow", help="the flow binary (stdio)")
    ap.add_argument("--data", help="the store directory (stdio)")
    ap.add_argument("--mcp-arg", action="append", help="a flag for flow mcp")
    ap.add_argument("--url", help="the /mcp URL (HTTP)")
    ap.add_argument("--token")
    ap.add_argument("--read-token")
    ap.add_argument("--run-token")
    a = ap.parse_args()
    t = Target(a)
    runs = {
        "every_tool": lambda: every_tool(t),
        "bounds": lambda: bounds(t),
        "progress": lambda: progress(t),
        "cancel": lambda: cancel(t),
        "approval": lambda: approval(t),
        "scopes": lambda: scopes(t, a.read_token, a.run_token),
    }
    asyncio.run(runs[a.scenario]())
    print(f"{a.scenario}: ok")


if __name__ == "__main__":
    main()
