"""LangGraph's side of the service bench's fork rows (issue 42, W4).

The same shape as the flowd row: a thread of N `inc` steps checkpointed by
LangGraph's SqliteSaver (WAL, synchronous=FULL, as flowd's store), then,
FORKS times, a fork from the checkpoint of step N/2:

* create: `update_state` on that past checkpoint's config, which writes a
  new checkpoint branching from it (LangGraph's "fork"), until it returns;
* first step: from the same start until the fork's first new step is
  durable (`invoke(None, fork, interrupt_after=["inc"], durability="sync")`
  returns once that step's checkpoint is written).

Usage: python langgraph_fork.py N FORKS DIR. Prints one JSON line:
{"create_ms": [...], "first_ms": [...], "langgraph": VERSION}. Exit 3 when
langgraph or its SQLite checkpointer is not installed (the bench then says
so and skips the comparison).
"""

import json
import sqlite3
import sys
import time
from typing import TypedDict

try:
    from importlib.metadata import version

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph
except ImportError as e:  # pragma: no cover - the bench reports it
    print(f"langgraph is not installed: {e}", file=sys.stderr)
    sys.exit(3)


class State(TypedDict):
    i: int
    limit: int


def inc(s: State) -> dict:
    return {"i": s["i"] + 1}


def more(s: State) -> str:
    return "inc" if s["i"] < s["limit"] else END


def main() -> None:
    n, forks, where = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    conn = sqlite3.connect(f"{where}/langgraph.db", check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    g = StateGraph(State)
    g.add_node("inc", inc)
    g.add_edge(START, "inc")
    g.add_conditional_edges("inc", more)
    app = g.compile(checkpointer=SqliteSaver(conn))
    config = {"configurable": {"thread_id": "parent"}, "recursion_limit": 2 * n + 10}
    app.invoke({"i": 0, "limit": n}, config)
    at = next(h for h in app.get_state_history(config) if h.values.get("i") == n // 2)
    created, first = [], []
    for _ in range(forks):
        t0 = time.perf_counter()
        fork = app.update_state(at.config, {"i": at.values["i"]})
        t1 = time.perf_counter()
        app.invoke(None, fork, interrupt_after=["inc"], durability="sync")
        t2 = time.perf_counter()
        created.append((t1 - t0) * 1e3)
        first.append((t2 - t0) * 1e3)
    print(json.dumps({"create_ms": created, "first_ms": first, "langgraph": version("langgraph")}))


if __name__ == "__main__":
    main()
