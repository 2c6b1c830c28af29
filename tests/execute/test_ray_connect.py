"""A Ray cluster that cannot be reached is refused in one line (exit 2) within the connect
timeout plus 5 s, and nothing is written: an address where nothing listens, and one where
something listens that is not Ray. The real entry point is used, so the one line on stderr
is what a terminal would show (Ray's retries print nothing there)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("ray")

RUN = ["run", "mlp", "--backends", "eager", "--executor", "ray", "--quiet"]


def refused_within(tmp_path, address: str, timeout_s: float) -> str:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "stackcost.cli", *RUN, "--ray-address", address,
         "--ray-connect-timeout", f"{timeout_s:g}", "--db", str(tmp_path / "s.db")],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    took = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("stackcost: error: ") and done.stderr.count("\n") == 1, (
        done.stderr
    )
    assert took < timeout_s + 5, f"refused after {took:.1f} s"
    assert list(tmp_path.iterdir()) == []
    return done.stderr


def test_an_address_where_nothing_listens(tmp_path):
    with socket.socket() as s:  # a port just freed: nothing listens on it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    err = refused_within(tmp_path, f"127.0.0.1:{port}", 30)
    assert f"no Ray cluster at 127.0.0.1:{port}: nothing answers there" in err, err


def test_an_address_that_answers_but_not_as_ray(tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    accepted = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    try:
        err = refused_within(tmp_path, f"127.0.0.1:{port}", 3)
    finally:
        server.close()
    assert "did not answer as a Ray cluster within 3 s" in err, err
