"""Scenario identity, settings and LoadGen's summary, without running LoadGen."""

from __future__ import annotations

import hashlib
import json

import pytest

from stackcost.cell import Cell
from stackcost.errors import SpecError
from stackcost.runspec.grammar import parse_scenarios
from stackcost.scenarios.settings import (
    KINDS,
    LoadGenSettings,
    parse_duration_ms,
    peak_precision,
    planned,
)
from stackcost.scenarios.summary import parse_summary
from tests.conftest import tiny_cell

SINGLE_STREAM_SUMMARY = """\
================================================
MLPerf Results Summary
================================================
SUT name : PySUT
Scenario : SingleStream
Mode     : PerformanceOnly
90.0th percentile latency (ns) : 2205571
Result is : VALID
  Min duration satisfied : Yes
  Min queries satisfied : Yes
  Early stopping satisfied: Yes
Early Stopping Result:
 * Processed at least 64 queries (913).
 * Early stopping 90.0th percentile estimate: 2221044

================================================
Additional Stats
================================================
QPS w/ loadgen overhead         : 455.59
90.00 percentile latency (ns)   : 2205571

No warnings encountered during test.

No errors encountered during test.
"""


def test_a_timed_loop_cell_keeps_its_key() -> None:
    """`scenario` is left out of the key when None: stored keys and history stay matched."""
    cell = tiny_cell()
    data = cell.model_dump(mode="json")
    data["model"] = cell.model.key_data()
    for name in ("train", "scenario"):
        del data[name]
    data["resolution"] = data.pop("sizes")["resolution"]
    expected = hashlib.sha1(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
    assert cell.key() == expected
    assert "scenario" not in cell.flat()


def test_scenario_settings_are_part_of_the_key() -> None:
    settings = LoadGenSettings()
    server = tiny_cell(scenario=settings.config("server"))
    tighter = tiny_cell(scenario=LoadGenSettings(latency_bound_ms=10).config("server"))
    assert len({tiny_cell().key(), server.key(), tighter.key()}) == 3
    # A knob the scenario does not read leaves its key alone.
    single = LoadGenSettings(latency_bound_ms=10).config("single-stream")
    assert (
        tiny_cell(scenario=single).key()
        == tiny_cell(scenario=settings.config("single-stream")).key()
    )
    assert Cell.model_validate_json(server.model_dump_json()).key() == server.key()
    assert server.flat()["scenario"] == "server 50ms"


def test_configs_hold_only_what_their_scenario_reads() -> None:
    s = LoadGenSettings(latency_bound_ms=20, samples_per_query=4, instances=3)
    assert s.config("server").latency_bound_ms == 20 and s.config("server").instances == 3
    assert s.config("offline").latency_bound_ms is None and s.config("offline").instances == 3
    assert s.config("multi-stream").samples_per_query == 4
    assert s.config("multi-stream").instances == 1
    for name, kind in KINDS.items():
        assert s.config(name).min_query_count == kind.early_stopping_queries
    # LoadGen 6.0.17's early-stopping minimums: below them a clean run is INVALID.
    assert {n: k.early_stopping_queries for n, k in KINDS.items()} == {
        "single-stream": 64,
        "multi-stream": 662,
        "server": 459,
        "offline": 1,
    }


def test_every_scenario_a_cell_can_name_has_its_loadgen_kind() -> None:
    from stackcost.cell import SCENARIOS

    assert tuple(KINDS) == SCENARIOS
    assert all(name == kind.name for name, kind in KINDS.items())


def test_planned_numbers_follow_the_calibration() -> None:
    s = LoadGenSettings(instances=2)
    assert planned(s.config("single-stream"), 2e6)["single_stream_expected_latency_ns"] == 2e6
    assert planned(s.config("server"), 2e6)["server_target_qps"] == pytest.approx(250)
    assert planned(s.config("offline"), 2e6)["offline_expected_qps"] > 1000
    assert peak_precision(500) == 0 and peak_precision(20) == 1


def test_parsing() -> None:
    assert parse_scenarios("all") == ["single-stream", "multi-stream", "server", "offline"]
    assert parse_scenarios("timed-loop,server") == ["timed-loop", "server"]
    assert parse_duration_ms("50ms", "x", 1e6) == 50
    assert parse_duration_ms("0.1s", "x", 1e6) == 100
    assert parse_duration_ms("2s", "x", 1e6) == 2000
    for bad, why in (
        ("fast", "is not a duration"),
        ("-1ms", "must be a positive duration of at most 1000s"),
        ("0s", "must be a positive"),
        ("2", "needs a unit: 2ms or 2s"),  # ms to one flag, s to another: refused for both
        ("1e30ms", "at most 1000s"),
    ):
        with pytest.raises(SpecError, match=why):
            parse_duration_ms(bad, "latency-bound", 1e6)
    with pytest.raises(SpecError, match="unknown scenario 'servr'"):
        parse_scenarios("servr")


def test_summary_is_read_as_loadgen_wrote_it() -> None:
    parsed = parse_summary(SINGLE_STREAM_SUMMARY)
    assert parsed["verdict"] == "VALID"
    assert parsed["summary"]["90.0th percentile latency (ns)"] == 2205571
    assert parsed["summary"]["Early stopping 90.0th percentile estimate"] == 2221044
    assert parsed["constraints"] == {
        "Min duration satisfied": True,
        "Min queries satisfied": True,
        "Early stopping satisfied": True,
    }
    assert "Processed at least 64 queries (913)." in parsed["notes"]
    invalid = parse_summary(SINGLE_STREAM_SUMMARY.replace(": VALID", ": INVALID"))
    assert invalid["verdict"] == "INVALID"


def test_a_sweep_spec_takes_scenarios_and_loadgen_settings() -> None:
    from stackcost.runspec.file import sweep_from_data

    spec = sweep_from_data(
        {
            "models": ["mlp"],
            "backends": ["eager"],
            "threads": 1,
            "scenarios": "timed-loop,server",
            "loadgen": {"latency_bound_ms": 20, "instances": 2},
        },
        "spec.yaml",
    )
    scenarios = [c.scenario for c in spec.cells()]
    assert scenarios[0] is None and scenarios[1].latency_bound_ms == 20
    assert scenarios[1].instances == 2
    with pytest.raises(SpecError, match="unknown scenario"):
        sweep_from_data({"models": ["mlp"], "scenarios": ["servr"]}, "spec.yaml")
