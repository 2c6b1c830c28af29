"""A generate cell's A/B judges TTFT and TPOT apart, from the same measurements (issue 40).

In the processes design the repetitions are synthetic (Runner.run_one replaced): a planted
prefill slowdown on the candidate must regress TTFT and leave TPOT unchanged. The CLI, the
blocks, the store and the verdicts are the real ones. The bursts design's tests are in
test_burst_design.py (synthetic workers) and below (real workers on llama-tiny).
"""

from __future__ import annotations

import json
import random
import re

from stackcost.cli import main
from stackcost.execute.runner import Runner
from stackcost.result import GenerationResult, RepetitionResult

TTFT_MS, TPOT_MS = 10.0, 2.0


def synthetic_generation(ttft_ms: float, tpot_ms: float) -> GenerationResult:
    return GenerationResult(
        batch=1,
        prompt_len=8,
        new_tokens=4,
        generations=5,
        ttft_ms=ttft_ms,
        tpot_p50_ms=tpot_ms,
        tpot_p90_ms=tpot_ms,
        tpot_p99_ms=tpot_ms,
        prefill_tokens_per_s=8e3 / ttft_ms,
        decode_tokens_per_s=1e3 / tpot_ms,
        output_tokens_per_s=4e3 / (ttft_ms + 3 * tpot_ms),
        e2e_ms=ttft_ms + 3 * tpot_ms,
        cold_ms=100.0,
        kv_cache_bytes=0,
        kv_bytes_per_element=4,
        weight_bytes=0,
        bytes_per_step=0,
        achieved_gbs=None,
        api="synthetic",
        timing="synthetic",
    )


def test_ttft_and_tpot_each_get_their_own_verdict(tmp_path, monkeypatch, capsys):
    rng = random.Random(3)
    calls: list[str] = []

    def run_one(self: Runner, run_id, cell, rep, artifacts) -> RepetitionResult:
        task = self.task_for(run_id, cell, rep, artifacts)
        slow = 1.2 if "SLOW_PREFILL" in self.executor.extra_env else 1.0  # the cand side
        calls.append(run_id)
        noise = rng.lognormvariate(0, 0.005)
        r = RepetitionResult(
            status="ok",
            repetition=task.repetition,
            generation=synthetic_generation(TTFT_MS * slow * noise, TPOT_MS * noise),
        )
        self.record(run_id, cell, r)
        return r

    monkeypatch.setattr(Runner, "run_one", run_one)
    js = tmp_path / "ab.json"
    argv = ["ab", "llama-tiny", "--scenario", "generate", "--prompt-len", "8"]
    argv += ["--new-tokens", "4", "--backends", "eager", "--batch-size", "1", "--threads", "1"]
    argv += ["--cand-env", "SLOW_PREFILL=1", "--min-blocks", "3", "--max-blocks", "3"]
    argv += ["--pacing", "processes"]  # run_one is what is replaced: whole repetitions
    code = main([*argv, "--db", str(tmp_path / "ab.db"), "--json", str(js)])
    out, err = capsys.readouterr()
    assert code == 1, out
    verdict = json.loads(js.read_text())
    cells = {c["metric"]: c for c in verdict["cells"]}
    assert set(cells) == {"ttft", "tpot"}
    assert cells["ttft"]["verdict"] == "regressed" and cells["ttft"]["design"] == "processes"
    assert abs(cells["ttft"]["result"]["ratio"] - 1.2) < 0.02
    assert cells["tpot"]["verdict"] == "unchanged"
    # One set of repetitions serves both metrics: 4 a block (ABBA), not 8.
    assert len(calls) == 4 * verdict["blocks"] == 12
    assert "regressed: llama-tiny eager generate b1 8p 4n fp32 t1 cpu ttft" in out
    assert "llama-tiny eager generate b1 8p 4n fp32 t1 cpu cand: TTFT 1" in err  # progress


def test_real_workers_alternate_whole_generations_in_bursts(tmp_path):
    """llama-tiny through the real paced worker: each block's two workers verify, then
    alternate generations; each is one repetition of real generations, paced."""
    import sqlite3

    from stackcost.execute.interleave import burst_shape

    least = burst_shape("generate").min_pairs

    js = tmp_path / "ab.json"
    argv = ["ab", "llama-tiny", "--scenario", "generate", "--prompt-len", "8"]
    argv += ["--new-tokens", "4", "--backends", "eager", "--batch-size", "1", "--threads", "1"]
    argv += ["--min-blocks", "2", "--max-blocks", "2", "--block-time", "0.05", "--quiet"]
    md = tmp_path / "ab.md"
    code = main([*argv, "--db", str(tmp_path / "ab.db"), "--json", str(js), "--markdown", str(md)])
    verdict = json.loads(js.read_text())
    # An A/A: nothing newly failing. A `regressed` is a false alarm the error budget allows
    # (up to alpha / 2 a metric, and a 2-block interval has one degree of freedom): what
    # this test checks is the bursts' mechanics, not the rate (gate_calibration.py does).
    assert code in (0, 1, 3), verdict["headline"]
    assert not any(c["verdict"] in ("newly failing", "failing", "fixed") for c in verdict["cells"])
    design = " ".join(md.read_text().split())
    assert f"(in a generate cell: whole generations, at least one, and {least}+ pairs" in design
    cells = {c["metric"]: c for c in verdict["cells"]}
    for c in cells.values():
        # Cut into bursts, none dropped: a note may only say where a noisy cell's spread is.
        note = re.sub(
            r"its processes differ more than their bursts( \(page faults a step: [^)]*\))?: "
            "more blocks average it",
            "",
            c["note"],
        )
        assert c["design"] == "bursts" and not note, c["note"]
        assert len(c["blocks"]) == 2
        assert all(len(b["base"]) == len(b["cand"]) >= least for b in c["blocks"])
    assert cells["ttft"]["base_median_ms"] > cells["tpot"]["base_median_ms"] > 0
    rows = sqlite3.connect(tmp_path / "ab.db").execute("SELECT result_json FROM repetitions")
    results = [json.loads(r) for (r,) in rows]
    assert len(results) == 4  # one worker a side per block
    for r in results:
        assert r["status"] == "ok" and r["stop_reason"] == "paced", r["reason"]
        bursts = r["details"]["paced"]["bursts"]
        # The sizing burst (one generation) and at least `least` paired bursts of whole
        # generations: as many as fit in --burst-ms (20 ms), at least one.
        steps = {b["burst_steps"] for c in cells.values() for b in c["blocks"]}
        generations = r["generation"]["generations"]
        assert bursts >= least + 1 and generations - 1 in {(bursts - 1) * n for n in steps}
        assert r["generation"]["new_tokens"] == 4 and r["verification"]["ok"]
