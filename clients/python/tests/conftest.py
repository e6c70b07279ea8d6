"""Real `flow serve` processes for the client's tests: each on 127.0.0.1:0
with its own temp `--data` store, bound to the triage example's Tools, and
ended by its pid when the test ends. A cutting TCP proxy drops a feed
mid-stream.

`FLOW_BIN` names the binary (`.ci/run` sets it); otherwise this checkout's
debug build is used, and the tests are skipped when there is none.
"""

import os
import queue
import re
import socket
import subprocess
import threading

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
TRIAGE = os.path.join(REPO, "examples", "flows", "triage")
REVIEW = os.path.join(REPO, "examples", "flows", "review", "review.json")


def flow_bin():
    explicit = os.environ.get("FLOW_BIN")
    if explicit:
        assert os.access(explicit, os.X_OK), f"FLOW_BIN={explicit} is not an executable"
        return explicit
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target"))
    path = os.path.join(target, "debug", "flow")
    if not os.access(path, os.X_OK):
        pytest.skip(f"no flow binary at {path}: cargo build -p flowd --bin flow, or set FLOW_BIN")
    return path


class Server:
    def __init__(self, data, *extra):
        self.data = data
        self.p = subprocess.Popen(
            [flow_bin(), "--data", str(data), "serve", "--listen", "127.0.0.1:0",
             "--tools", os.path.join(TRIAGE, "flow.toml"), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )
        self.log = []
        found = queue.Queue()

        def read():
            for line in self.p.stdout:
                text = line.decode("utf-8", "replace")
                self.log.append(text)
                m = re.search(r"listening on (http://[0-9.:]+)", text)
                if m:
                    found.put(m.group(1))
            found.put(None)

        threading.Thread(target=read, daemon=True).start()
        try:
            self.url = found.get(timeout=60)
        except queue.Empty:
            self.url = None
        if not self.url:
            self.stop()
            raise RuntimeError("flow serve did not start:\n" + "".join(self.log))

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(15)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path / "a")
    yield s
    s.stop()


@pytest.fixture
def other_server(tmp_path):
    s = Server(tmp_path / "b")
    yield s
    s.stop()


class CuttingProxy:
    """Forwards 127.0.0.1:port to the server; the first connection is cut
    after ``cut_after`` bytes from the server, the rest pass through."""

    def __init__(self, target_url, cut_after):
        host, port = target_url.removeprefix("http://").split(":")
        self.target = (host, int(port))
        self.cut_after = cut_after
        self.connections = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closing:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            limit = self.cut_after if self.connections == 1 else None
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._pipe, args=(client, upstream, None), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, limit), daemon=True).start()

    @staticmethod
    def _pipe(src, dst, limit):
        sent = 0
        try:
            while True:
                chunk = src.recv(4096)
                if not chunk:
                    break
                if limit is not None and sent + len(chunk) >= limit:
                    dst.sendall(chunk[: limit - sent])
                    break
                dst.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self):
        self.closing = True
        self.sock.close()
