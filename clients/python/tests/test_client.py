"""The client against the real `flow serve` (docs/http.md): a review and the
triage example paused and answered, facts streamed with a reconnect in the
middle, paging, fork, replay, halt, archives from one server into another,
and the typed errors."""

import itertools
import json
import os
import io
import tarfile
from decimal import Decimal

import pytest

from conftest import REPO, REVIEW, TRIAGE, CuttingProxy
from flowd_client import Client, Conflict, FlowdError, NotFound, Refused, Unavailable

TRIAGE_FLOW = os.path.join(TRIAGE, "triage.json")
OUTAGE = {"ticket": "The site is down for all our users!", "customer": "Acme"}


def test_readme_snippet(server, monkeypatch, capsys):
    """clients/python/README.md's first Python block, exactly as printed,
    run from the repository root against this server."""
    with open(os.path.join(os.path.dirname(__file__), "..", "README.md")) as f:
        readme = f.read()
    snippet = readme.split("```python\n", 1)[1].split("```", 1)[0]
    assert "http://127.0.0.1:8080" in snippet
    monkeypatch.chdir(REPO)
    ns = {}
    exec(snippet.replace("http://127.0.0.1:8080", server.url), ns)
    assert ns["done"]["state"] == "completed"
    assert ns["done"]["output"]["review"] == {"decision": "approved"}
    assert capsys.readouterr().out.startswith("completed ")


def test_triage_pause_inbox_resume_replay(server):
    c = Client(server.url)
    assert c.health() is not None
    run = c.start_run(TRIAGE_FLOW, OUTAGE, wait=20)
    assert run["state"] == "paused", run
    rid = run["run"]
    # The Python classifier ran: its Reply is in the history.
    replies = c.facts(rid, kind="Reply")["facts"]
    assert replies[0]["fact"]["outcome"] == {"Ok": {"category": "outage", "severity": "high"}}
    # Numbers stay exact: the model parameters are Decimals, not floats.
    calls = c.facts(rid, kind="Call")["facts"]
    assert calls[1]["fact"]["args"]["params"]["temperature"] == Decimal("0.2")
    inbox = c.open_calls()
    assert [(x["run"], x["tool"]) for x in inbox["calls"]] == [(rid, "std/human#input")]
    assert inbox["total"] == 1 and inbox["next"] is None
    assert [x["run"] for x in c.all_open_calls(run=rid, tool="std/human#input", limit=1)] == [rid]
    assert c.open_calls(node="nowhere")["total"] == 0
    call = inbox["calls"][0]["call"]
    view = c.get_run(rid)
    assert view["state"] == "paused" and view["pending"][0]["call"] == call
    done = c.answer(rid, call, {"decision": "send", "edited": "We are on it."}, wait=20)
    assert done["state"] == "completed" and done["output"]["review"]["edited"] == "We are on it."
    assert c.open_calls()["calls"] == []
    assert c.replay(rid)["verdict"] == "matched"
    assert "classify" in c.source(rid, "triage.json")


def test_stream_facts_reconnects_without_gap_or_repeat(server):
    c = Client(server.url)
    run = c.start_run(TRIAGE_FLOW, OUTAGE, wait=20)
    rid = run["run"]
    paused_at = c.get_run(rid)["lastFact"]["n"]
    proxy = CuttingProxy(server.url, cut_after=2500)
    try:
        streamed = []
        for fact in Client(proxy.url).stream_facts(rid):
            streamed.append(fact)
            if fact.n == paused_at:
                # Live from here: answer the review, the feed goes on to End.
                c.answer(rid, run["pending"][0]["call"], {"decision": "send"})
        assert proxy.connections >= 2, "the first connection was cut and opened again"
    finally:
        proxy.close()
    stored = c.facts(rid, limit=200)["facts"]
    assert [f.n for f in streamed] == list(range(1, len(stored) + 1))
    assert [f.kind for f in streamed] == [f["kind"] for f in stored]
    assert streamed[-1].kind == "End"
    # Resuming after a given fact starts right after it.
    again = list(c.stream_facts(rid, after=paused_at))
    assert [f.n for f in again] == list(range(paused_at + 1, len(stored) + 1))


def test_list_runs_pages_through_next_after(server):
    c = Client(server.url)
    made = {c.start_run(REVIEW, {"text": f"t{i}"})["run"] for i in range(5)}
    for r in made:
        c.wait(r)
    page = c.runs(limit=2)
    assert len(page["runs"]) == 2 and page["nextAfter"]
    seen = [r["run"] for r in c.iter_runs(page_size=2)]
    assert len(seen) == len(set(seen)) and set(seen) == made
    assert {r["run"] for r in c.iter_runs(state="paused", page_size=3)} == made
    assert list(c.iter_runs(state="completed")) == []


def test_the_run_query_filters_counts_and_pages_newest_first(server):
    """Issue 38 item 1: the run query's filters through the client."""
    c = Client(server.url)
    flow = json.load(open(REVIEW))
    flow["id"] = "searchable"
    flow["runtime_hints"] = {"search_attributes": {"text": "/input/text"}}
    made = [c.start_run(flow, {"text": t})["run"] for t in ("a", "b", "a")]
    other = c.start_run(REVIEW, {"text": "a"})["run"]
    for r in made + [other]:
        c.wait(r)
    got = [r["run"] for r in c.iter_runs(page_size=1, newest=True, flow="searchable")]
    assert got == list(reversed(made))
    assert [r["run"] for r in c.iter_runs(attrs={"text": "a"})] == [made[0], made[2]]
    assert [r["run"] for r in c.iter_runs(state=["paused", "halted"], flow="searchable", attrs={"text": "b"})] == [made[1]]
    counts = c.count_runs(flow="searchable")
    assert counts["total"] == 3 and counts["byState"]["paused"] == 3
    assert counts["byFlow"] == [{"flow": "searchable", "count": 3}]
    with pytest.raises(Refused) as e:
        c.runs(started_from=5, started_to=5)
    assert e.value.status == 400 and "range is empty" in e.value.detail


def test_fork_from_a_checkpoint(server):
    c = Client(server.url)
    run = c.start_run(TRIAGE_FLOW, OUTAGE, wait=20)
    checkpoints = c.facts(run["run"], kind="Checkpoint")["facts"]
    classify = next(f["n"] for f in checkpoints if f["fact"].get("node") == "classify")
    forked = c.fork(run["run"], classify, set={"ticket": "I was charged twice, refund please"}, wait=20)
    assert forked["state"] == "paused" and forked["run"] != run["run"]
    assert "(medium)" in forked["pending"][0]["args"]["prompt"]
    assert c.get_run(forked["run"])["parent"]["run"] == run["run"]
    assert c.lineage(forked["run"]) == {
        "run": forked["run"],
        "truncated": False,
        "ancestors": [{"run": forked["run"], "from": run["run"], "kind": "fork", "checkpoint": classify}],
    }
    assert c.lineage(run["run"])["ancestors"] == []


def test_halt_then_continue(server):
    c = Client(server.url)
    run = c.start_run(REVIEW, {"text": "halt me"}, wait=10)
    c.halt(run["run"])
    assert c.get_run(run["run"])["state"] == "halted"
    back = c.resume(run["run"], wait=10)
    assert back["state"] == "paused"
    c.answer(run["run"], back["pending"][0]["call"], {"decision": "approved"}, wait=10)
    with pytest.raises(Conflict):  # the run has ended
        c.halt(run["run"])


def test_archive_round_trip(server, other_server, tmp_path):
    a, b = Client(server.url), Client(other_server.url)
    run = a.start_run(REVIEW, {"text": "archive me"}, wait=10)
    a.answer(run["run"], run["pending"][0]["call"], {"decision": "approved"}, wait=10)
    data = a.export_archive(run["run"])
    names = tarfile.open(fileobj=io.BytesIO(data)).getnames()
    assert any(n.endswith("history.jsonl") for n in names), names
    path = a.export_archive(run["run"], tmp_path / "run.tar")
    first = b.import_archive(path)
    assert first["run"] == run["run"] and first["imported"] is True
    assert b.import_archive(data)["imported"] is False  # idempotent
    assert b.replay(run["run"])["verdict"] == "matched"
    assert b.get_run(run["run"])["state"] == "completed"
    with pytest.raises(Refused):
        b.import_archive(b"not a tar archive")


def test_typed_errors(server):
    c = Client(server.url)
    with pytest.raises(NotFound) as e:
        c.get_run("run-01m8aaaaaaaaaaaaaaaaaaaaaa")
    assert e.value.status == 404 and e.value.title and e.value.detail
    with pytest.raises(NotFound):
        list(c.stream_facts("run-01m8aaaaaaaaaaaaaaaaaaaaaa"))
    bad_flow = json.loads(open(REVIEW).read())
    bad_flow["edges"].append({"type": "direct", "from": "review", "to": "nowhere"})
    with pytest.raises(Refused) as e:
        c.start_run(bad_flow, {"text": "x"})
    assert e.value.status == 422 and e.value.diagnostics
    with pytest.raises(Refused):
        c.start_run(REVIEW, {"text": 5})
    run = c.start_run(REVIEW, {"text": "x"}, wait=10)
    call = run["pending"][0]["call"]
    with pytest.raises(Refused):  # the reply does not fit resume_schema
        c.answer(run["run"], call, {"decision": "maybe"})
    c.answer(run["run"], call, {"decision": "rejected"}, wait=10)
    with pytest.raises(Conflict):  # no longer open
        c.answer(run["run"], call, {"decision": "approved"})
    with pytest.raises(Refused):
        c.runs(state="sleeping")
    assert isinstance(NotFound(404, "", ""), FlowdError)


def test_no_server_is_unavailable(server):
    url = server.url
    server.stop()
    c = Client(url, timeout=5)
    with pytest.raises(Unavailable):
        c.get_run("run-01m8aaaaaaaaaaaaaaaaaaaaaa")
    with pytest.raises(Unavailable):
        list(itertools.islice(c.stream_facts("run-01m8aaaaaaaaaaaaaaaaaaaaaa", retries=1), 1))
