"""The generate scenario end to end: a worker per repetition, verification by teacher
forcing, token numbers stored, refusals with their reasons."""

from __future__ import annotations

from pathlib import Path

import pytest

from stackcost.cell import Cell, ModelRef
from stackcost.execute.worker import run_task
from stackcost.measure.protocol import Protocol
from stackcost.scenarios.task import RepetitionTask
from tests.test_cli import run_cli

QUICK = Protocol(min_time_s=0.0, max_time_s=5.0)


def generate_task(tmp_path: Path, backend: str = "eager", model: str = "llama-tiny", **kw):
    cell = Cell(
        model=ModelRef(name=model, **kw.pop("ref", {})),
        backend=backend,
        mode="generate",
        batch_size=kw.pop("batch", 2),
        sizes={"prompt_len": 12, "new_tokens": 6},
        threads=1,
    )
    return RepetitionTask(
        cell=cell, protocol=QUICK, tolerance=1e-4, timeout_s=120, workdir=str(tmp_path / "w")
    )


def test_eager_generates_and_is_verified(tmp_path: Path) -> None:
    result = run_task(generate_task(tmp_path))
    assert result.status == "ok", result.reason
    g = result.generation
    assert g is not None and g.batch == 2 and g.prompt_len == 12 and g.new_tokens == 6
    assert g.generations >= 3 and g.ttft_ms > 0 and g.tpot_p50_ms and g.tpot_p50_ms > 0
    assert g.tpot_p50_ms <= g.tpot_p90_ms <= g.tpot_p99_ms
    # Decode tokens/s counts both rows; samples are the decode steps (5 per generation).
    assert result.samples_ns and len(result.samples_ns) == 5 * g.generations
    assert g.decode_tokens_per_s == pytest.approx(result.throughput)
    # llama-tiny: 2 layers x 2 kv heads x 16 dims x K,V x 2 rows x 18 positions x fp32.
    assert g.kv_cache_bytes == 2 * 2 * 16 * 2 * 2 * 18 * 4
    assert g.weight_bytes > 0 and g.achieved_gbs and g.achieved_gbs > 0
    assert g.token_agreement == 1.0 and g.agreeing_prefix == 6  # eager is the reference
    v = result.verification
    assert (
        v is not None
        and v.ok
        and [o.name for o in v.outputs]
        == [
            "prefill logits",
            "decode logits",
        ]
    )
    assert "EOS ignored" in g.definition and g.timing.startswith("streamer callback")


def test_perturbed_logits_are_wrong(tmp_path: Path) -> None:
    result = run_task(generate_task(tmp_path, "tests.generation.perturbed:PerturbedBackend"))
    assert result.status == "wrong"
    assert "max relative error" in result.reason
    assert result.generation is not None  # the timings are kept, and marked invalid


def test_a_rung_without_a_generator_is_unsupported(tmp_path: Path) -> None:
    result = run_task(generate_task(tmp_path, "torchscript"))
    assert result.status == "unsupported"
    assert "does not generate tokens" in result.reason


def test_mixture_of_experts_is_refused(tmp_path: Path) -> None:
    tiny = dict(
        vocab_size=64, hidden_size=32, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, num_local_experts=2,
        max_position_embeddings=64,
    )  # fmt: skip
    task = generate_task(
        tmp_path, model="hf:mixtral", ref={"config": tiny, "head": "causal-lm"}, batch=1
    )
    result = run_task(task)
    assert result.status == "unsupported"
    assert "mixture of experts" in result.reason and "router" in result.reason


def test_generate_needs_a_decoder(capsys) -> None:
    code, _, err = run_cli(capsys, "run", "resnet18", "--scenario", "generate")
    assert code == 2
    assert "needs a decoder with its LM head" in err and "llama-150m" in err


def test_generate_runs_alone(capsys) -> None:
    code, _, err = run_cli(capsys, "run", "llama-tiny", "--scenario", "generate,single-stream")
    assert code == 2 and "runs on its own" in err


def test_generate_through_the_cli(tmp_path: Path, capsys) -> None:
    db = tmp_path / "g.db"
    code, out, err = run_cli(
        capsys, "run", "llama-tiny", "--scenario", "generate", "--prompt-len", "8",
        "--new-tokens", "4", "--batch-size", "1,2", "--backends", "eager,torchscript",
        "--min-time", "0", "--db", str(db), "--quiet",
    )  # fmt: skip
    assert code == 0, err
    assert "TTFT" in out and "TPOT p50" in out and "EOS ignored" in out
    assert "does not generate tokens" in out  # torchscript's reason, under the table
    code, md, err = run_cli(capsys, "report", "--db", str(db), "--format", "md")
    assert code == 0, err
    rows = [line for line in md.splitlines() if line.startswith("| llama-tiny")]
    assert len(rows) == 4 and "TPOT p50 (ms)" in md and "EOS ignored" in md
    assert "median (ms)" not in md  # no timed-loop summary for generate cells
    figures = tmp_path / "figs"
    code, _, err = run_cli(
        capsys, "report", "--db", str(db), "--figures", str(figures), "-o", str(tmp_path / "r.html")
    )
    assert code == 0, err
    assert (figures / "tpot_vs_batch-llama-tiny.png").is_file()
    html = (tmp_path / "r.html").read_text()
    assert 'id="generation"' in html and html.count('<tr class="status-ok">') == 2
    assert html.count('<tr class="status-unsupported">') == 2  # torchscript generates nothing
