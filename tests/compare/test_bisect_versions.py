"""`bisect --versions` against a local wheelhouse of a tiny fake package (no index needed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from stackcost.cli import main

SETUP = """\
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"
[project]
name = "slowpkg"
version = "{v}"
"""


@pytest.fixture
def wheelhouse(tmp_path):
    wheels = tmp_path / "wheels"
    for v, cost in (("1.0", 0.0), ("2.0", 1.0), ("3.0", 1.0)):
        src = tmp_path / f"src{v}"
        (src / "slowpkg").mkdir(parents=True)
        (src / "pyproject.toml").write_text(SETUP.format(v=v))
        (src / "slowpkg" / "__init__.py").write_text(f"COST = {cost}\n")
        build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        if subprocess.run([*build, "-w", str(wheels), str(src)], capture_output=True).returncode:
            pytest.skip("cannot build a wheel here (setuptools missing)")
    return wheels


def test_versions_bisect_finds_the_first_slow_version(wheelhouse, capsys):
    cmd = "python -c \"import slowpkg; print('value=%s' % slowpkg.COST)\""
    argv = ["bisect", "--versions", "slowpkg==1.0,slowpkg==2.0,slowpkg==3.0", "--command", cmd]
    argv += ["--pip-arg=--no-index", f"--pip-arg=--find-links={wheelhouse}"]
    code = main(argv)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "first bad: slowpkg==2.0" in out
