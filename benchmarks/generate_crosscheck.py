"""Does stackcost's llama.cpp rung time generation as a bare llama.cpp loop does?

llama-cpp-python's wheel ships no `llama-bench` (only the library), so the reference is a
bare loop on llama.cpp's C API through the same binding, in a process of its own: the
same GGUF (written from the same seeded weights by stackcost.generation.gguf, quantized by
llama.cpp's own quantizer), the same context settings, then `llama_decode` of the prompt
and of one token at a time, greedy over `llama_get_logits_ith`, timed with
time.perf_counter_ns around nothing else. stackcost's side is a real `stackcost run
MODEL --scenario generate --backends llama.cpp` (a worker process per repetition, its
verification and its token metrics). The two alternate, round by round (A B A B), so
drift hits both alike. PASS when the median over rounds of stackcost's TPOT p50 and TTFT
are each within 5% of the bare loop's (measure on a quiet machine).

    python benchmarks/generate_crosscheck.py [--model llama-150m] [--precision fp32]
        [--prompt-len 128] [--new-tokens 64] [--threads 2] [--rounds 3] [--json PATH]
    python benchmarks/generate_crosscheck.py --bare ...   # one bare round (the B side)
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TOLERANCE = 0.05
GENERATIONS = 5  # timed bare generations per round, after one cold


def bare(args: argparse.Namespace) -> dict:
    """One bare round: build the GGUF, then time GENERATIONS greedy generations."""
    import llama_cpp

    from stackcost import zoo
    from stackcost.cell import ModelRef
    from stackcost.generation.gguf import FTYPES, quantize, write_gguf
    from stackcost.scenarios.generate import prompt_ids

    ref = ModelRef(name=args.model)
    workload = zoo.workload_of(ref)
    sizes = {"prompt_len": args.prompt_len, "new_tokens": args.new_tokens}
    model = zoo.build_model(ref, sizes, workload)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model-f32.gguf"
        write_gguf(model, path)
        if args.precision != "fp32":
            out = Path(tmp) / "model-q.gguf"
            quantize(path, out, FTYPES[args.precision], args.threads)
            path = out
        del model
        kv = llama_cpp.GGML_TYPE_F32 if args.precision == "fp32" else llama_cpp.GGML_TYPE_F16
        # The rung's settings (generation/llamacpp.py): n_ctx rounded up to 256, the whole
        # prompt in one decode, no flash attention, threads as the cell's.
        llm = llama_cpp.Llama(
            model_path=str(path),
            n_ctx=-(-(args.prompt_len + args.new_tokens) // 256) * 256,
            n_batch=max(512, -(-args.prompt_len // 64) * 64),
            n_threads=args.threads,
            n_threads_batch=args.threads,
            logits_all=False,
            type_k=kv,
            type_v=kv,
            flash_attn=False,
            verbose=False,
        )
        ctx, vocab = llm.ctx, llm.n_vocab()
        prompt = prompt_ids(vocab, 1, args.prompt_len, ref.seed)[0]

        def decode(tokens: list[int]) -> None:
            array = (llama_cpp.llama_token * len(tokens))(*tokens)
            if llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(array, len(tokens))):
                raise RuntimeError("llama_decode failed")

        def last() -> int:
            ptr = llama_cpp.llama_get_logits_ith(ctx, -1)
            return int(np.ctypeslib.as_array(ptr, shape=(vocab,)).argmax())

        runs = []
        for _ in range(GENERATIONS + 1):
            llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
            start = time.perf_counter_ns()
            decode([int(t) for t in prompt])
            token_ns, token = [], last()
            token_ns.append(time.perf_counter_ns())
            for _ in range(args.new_tokens - 1):
                decode([token])
                token = last()
                token_ns.append(time.perf_counter_ns())
            runs.append((start, token_ns))
    timed = runs[1:]  # the first is cold
    steps = [b - a for _, ns in timed for a, b in zip(ns[:-1], ns[1:], strict=True)]
    return {
        "ttft_ms": statistics.median(ns[0] - s for s, ns in timed) / 1e6,
        "tpot_p50_ms": float(np.percentile(steps, 50)) / 1e6,
    }


def ours(args: argparse.Namespace, db: Path) -> dict:
    """One stackcost round: a real run, one repetition, in a store of its own."""
    from stackcost.cli import main as stackcost
    from stackcost.store.database import Store
    from stackcost.store.runs import RunResult

    argv = [
        "run", args.model, "--scenario", "generate", "--backends", "llama.cpp",
        "--precision", args.precision, "--prompt-len", str(args.prompt_len),
        "--new-tokens", str(args.new_tokens), "--threads", str(args.threads),
        "--repeats", "1", "--min-time", "0", "--db", str(db), "--quiet",
    ]  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()):  # its table: this script prints its own
        code = stackcost(argv)
    with Store(db, read_only=True) as store:
        run = RunResult.from_store(store, store.run_ids()[-1])
    (cell,) = run.cells()
    rep = cell.repetitions[-1]
    if code != 0 or rep.generation is None:
        sys.exit(f"stackcost's round failed: {rep.status} {rep.reason}")
    return {"ttft_ms": rep.generation.ttft_ms, "tpot_p50_ms": rep.generation.tpot_p50_ms}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="llama-150m")
    p.add_argument("--precision", default="fp32", choices=("fp32", "w8", "w4"))
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", metavar="PATH", help="also write the rounds and verdict as JSON")
    p.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.bare:
        print(json.dumps(bare(args)))
        return 0
    flags = [
        f"--model={args.model}", f"--precision={args.precision}",
        f"--prompt-len={args.prompt_len}", f"--new-tokens={args.new_tokens}",
        f"--threads={args.threads}",
    ]  # fmt: skip
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            a = ours(args, Path(tmp) / f"round{i}.db")
            out = subprocess.run(
                [sys.executable, __file__, "--bare", *flags], capture_output=True, text=True
            )
            if out.returncode:
                sys.exit(f"bare round failed:\n{out.stderr[-2000:]}")
            b = json.loads(out.stdout.strip().splitlines()[-1])
            rounds.append({"stackcost": a, "bare": b})
            print(
                f"round {i + 1}: stackcost TTFT {a['ttft_ms']:.2f} ms TPOT {a['tpot_p50_ms']:.3f} ms"
                f" | bare TTFT {b['ttft_ms']:.2f} ms TPOT {b['tpot_p50_ms']:.3f} ms",
                flush=True,
            )
    verdict = {}
    for key in ("ttft_ms", "tpot_p50_ms"):
        diffs = [r["stackcost"][key] / r["bare"][key] - 1 for r in rounds]
        verdict[key] = statistics.median(diffs)
        state = "PASS" if abs(verdict[key]) <= TOLERANCE else "FAIL"
        print(f"{key}: median difference {verdict[key]:+.1%} over {len(diffs)} rounds: {state}")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"args": vars(args), "rounds": rounds, "median_difference": verdict}, indent=2
            )
        )
    return 0 if all(abs(v) <= TOLERANCE for v in verdict.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
