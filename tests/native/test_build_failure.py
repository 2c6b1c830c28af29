"""A failed build says why: the compiler's own last lines, not just an exit code."""

from __future__ import annotations

import shutil

import pytest

from stackcost.execute.process import reason_of
from stackcost.native.build import BuildError, _compile, toolchain_problem
from stackcost.result import headline


@pytest.mark.skipif(
    toolchain_problem("onednn", shutil.which) is not None,
    reason=f"toolchain missing: {toolchain_problem('onednn', shutil.which)}",
)
def test_compile_error_reports_the_compilers_last_lines(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\nproject(broken CXX)\n"
        "add_executable(broken broken.cpp)\n"
    )
    (src / "broken.cpp").write_text("int main() { return undeclared_name_xyz; }\n")
    with pytest.raises(BuildError) as err:
        _compile(src, tmp_path / "work", shutil.which)
    message = str(err.value)
    assert "--build" in message and "failed (exit" in message
    assert "undeclared_name_xyz" in message  # g++'s diagnostic, quoted from its output
    assert len(message.splitlines()) <= 21  # the tail, not the whole log
    # A cell that fails on this build stores the whole message; its headline, the one line
    # a table shows, is the compiler's diagnostic.
    assert "undeclared_name_xyz" in headline(reason_of(err.value))
