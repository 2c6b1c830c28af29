"""The command line's small grammars: backend options."""

from __future__ import annotations

import pytest

from stackcost.errors import SpecError
from stackcost.runspec.grammar import parse_options


def test_an_option_key_follows_the_last_dot_so_backend_names_may_hold_dots():
    got = parse_options(
        ["llama.cpp.w4_type=Q4_K_M", "onnxruntime.accuracy_level=1", "pkg.mod:Rung.knob=a=b"]
    )
    assert got == {
        "llama.cpp": {"w4_type": "Q4_K_M"},
        "onnxruntime": {"accuracy_level": "1"},
        "pkg.mod:Rung": {"knob": "a=b"},
    }


@pytest.mark.parametrize("item", ["eager", "eager=1", ".key=1", "eager.=1"])
def test_an_option_without_backend_key_and_value_is_refused(item):
    with pytest.raises(SpecError, match="backend.key=value"):
        parse_options([item])
