"""The docs' runnable blocks as tests (Sybil): every `sh` and `python` block of the pages
below runs, in order, in one fresh directory per page, with the installed `stackcost` on
PATH. A block that is not meant to run here (an install, a GPU, minutes of work) is
marked `<!-- skip: next -->` just above it."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from sybil import Sybil
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser

TESTED = ["docs/getting-started.md"]


def run_shell(example) -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", example.parsed],
        cwd=example.namespace["workdir"], env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, f"{example.path}:{example.line}\n{done.stdout}\n{done.stderr}"


def setup(namespace: dict) -> None:
    namespace["workdir"] = tempfile.mkdtemp(prefix="stackcost-docs-")
    namespace["cwd"] = os.getcwd()
    os.chdir(namespace["workdir"])  # the Python blocks read what the shell blocks wrote


def teardown(namespace: dict) -> None:
    os.chdir(namespace["cwd"])


pytest_collect_file = Sybil(
    parsers=[CodeBlockParser("sh", run_shell), PythonCodeBlockParser(), SkipParser()],
    patterns=[Path(p).name for p in TESTED],
    path="docs",
    setup=setup,
    teardown=teardown,
).pytest()
