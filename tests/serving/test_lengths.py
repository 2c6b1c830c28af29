"""Request lengths: fixed, uniform around the axes, or a trace file."""

from __future__ import annotations

from pathlib import Path

import pytest

from stackcost.serving.lengths import Lengths, draw


def test_fixed_gives_the_axes() -> None:
    assert draw("fixed", 128, 64, 3, seed=0) == [Lengths(128, 64)] * 3


def test_uniform_stays_within_its_fractions_and_is_seeded() -> None:
    got = draw("uniform:0.5-1.5", 100, 40, 500, seed=3)
    assert all(50 <= g.prompt <= 150 and 20 <= g.output <= 60 for g in got)
    assert len({g.prompt for g in got}) > 50
    assert got == draw("uniform:0.5-1.5", 100, 40, 500, seed=3)


def test_a_trace_file_is_cycled_in_order(tmp_path: Path) -> None:
    trace = tmp_path / "lengths.csv"
    trace.write_text("# prompt,output\n10,5\n\n20,7\n")
    assert draw(f"file:{trace}", 1, 1, 3, seed=0) == [
        Lengths(10, 5),
        Lengths(20, 7),
        Lengths(10, 5),
    ]


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("gaussian", "is not a form"),
        ("uniform:2-1", "0 < LO <= HI"),
        ("uniform:x", "0 < LO <= HI"),
        ("file:/nonexistent/lengths.csv", "no such file"),
    ],
)
def test_bad_lengths_are_refused_naming_the_value(spec: str, says: str) -> None:
    with pytest.raises(ValueError, match=says) as info:
        draw(spec, 10, 10, 1, seed=0)
    assert repr(spec) in str(info.value) and "allowed" in str(info.value)


def test_a_bad_trace_line_is_named_by_its_number(tmp_path: Path) -> None:
    trace = tmp_path / "lengths.csv"
    trace.write_text("10,5\n10;5\n")
    with pytest.raises(ValueError, match=r"lengths.csv:2"):
        draw(f"file:{trace}", 1, 1, 1, seed=0)


def test_longest_bounds_every_request_a_form_draws(tmp_path: Path) -> None:
    from stackcost.serving.lengths import longest

    assert longest("fixed", 8, 4).tokens == 12
    most = longest("uniform:0.5-1.5", 8, 4)
    drawn = draw("uniform:0.5-1.5", 8, 4, 2000, seed=3)
    assert max(d.prompt for d in drawn) <= most.prompt == 12
    assert max(d.output for d in drawn) <= most.output == 6
    assert max(d.prompt + d.output for d in drawn) <= most.tokens
    trace = tmp_path / "t.csv"
    trace.write_text("30,2\n5,20\n")
    # One request's most tokens (30+2), not the longest prompt and output together.
    assert longest(f"file:{trace}", 8, 4) == type(most)(30, 20, 32)
