"""Does stackcost's llama.cpp perplexity agree with llama.cpp's own `llama-perplexity`?

For one checkpoint folder (a decoder `stackcost train --keep-weights` kept) and the
held-out files of stdlib-text, at each precision:

1. stackcost writes and quantizes the GGUF file as its llama.cpp rung does (F32, Q8_0,
   Q4_0) and reads the rung's logits through its teacher-forced path (llama-cpp-python:
   the context half as one prefill, then one cached step per token);
2. llama.cpp's `llama-perplexity`, built from the llama-cpp-python sdist's own sources
   (the same llama.cpp commit), reads the same GGUF and the same text;
3. both score the same tokens the way `llama-perplexity` does: chunks of `--ctx` tokens,
   the second half of each predicted from the ones before it.

The text is the held-out files' raw text, joined by newlines, with no special token
(`llama-perplexity` would read `<|endoftext|>` as text). Its token ids from the
checkpoint's tokenizer are checked equal to llama.cpp's tokenization first: otherwise the
two would score different tokens.

    python benchmarks/llamacpp_perplexity.py --checkpoint DIR --tool PATH/llama-perplexity \
        [--text FILE] [--ctx 128] [--chunks 64] [--precision fp32,w8,w4] [--json PATH]

--text scores a text file of your own instead of stdlib-text's held-out files (a folder
`stackcost heldout hf:DIR --data FILE` scores: any decoder with a GGUF conversion, GPT-2's
included).

Build the tool (about 10 minutes on 2 cores): unpack `pip download --no-binary :all:
--no-deps llama-cpp-python==VERSION`, then in `vendor/llama.cpp`: `cmake -B build
-DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TOOLS=ON
-DBUILD_SHARED_LIBS=OFF && cmake --build build --target llama-perplexity`.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

FINAL = re.compile(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)")


def held_out_text() -> str:
    from stackcost.data import stdlib_text

    corpus = stdlib_text.corpus()
    return "\n".join(p.read_text(encoding="utf-8") for p in corpus.test)


def generator(checkpoint: Path, precision: str, ctx: int, threads: int, workdir: Path) -> Any:
    """stackcost's llama.cpp rung for the checkpoint, prepared (its GGUF written)."""
    from stackcost import zoo
    from stackcost.cell import Cell
    from stackcost.generation.base import Decoder
    from stackcost.generation.llamacpp import LlamaCppGenerator
    from stackcost.runspec.run import model_ref

    ref = model_ref(f"hf:{checkpoint}")
    model = zoo.build_model(ref, {})
    cell = Cell(
        model=ref,
        backend="llama.cpp",
        batch_size=1,
        sizes={"prompt_len": ctx // 2 + 1, "new_tokens": ctx - ctx // 2},
        precision=precision,
        threads=threads,
    )
    home = workdir / precision
    home.mkdir(parents=True)
    gen = LlamaCppGenerator(Decoder(model, cell, home, None, zoo.weights_digest(model)))
    gen.prepare()
    return gen


def stackcost_ppl(gen: Any, ids: np.ndarray, ctx: int, chunks: int) -> float:
    """llama-perplexity's protocol over the rung's teacher-forced logits."""
    from stackcost.generation.quality import score

    first = ctx // 2
    nll, count = 0.0, 0
    for c in range(chunks):
        chunk = ids[c * ctx : (c + 1) * ctx][None, :]
        logits = gen.teacher_forced(chunk, first + 1)[:, :-1]  # positions first..ctx-2
        quality = score(logits, chunk[:, first + 1 :])
        nll += quality.nll * quality.tokens
        count += quality.tokens
    return float(np.exp(nll / count))


def tool_ppl(
    tool: Path, gguf: Path, text: Path, ctx: int, chunks: int, threads: int, kv: str
) -> tuple[float, float, str]:
    argv = [
        str(tool), "-m", str(gguf), "-f", str(text), "-c", str(ctx), "-b", str(ctx),
        "--chunks", str(chunks), "-t", str(threads), "-ctk", kv, "-ctv", kv,
    ]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    found = FINAL.search(out.stdout + out.stderr)
    if found is None:
        raise RuntimeError(f"no final estimate in llama-perplexity's output:\n{out.stderr[-2000:]}")
    return float(found.group(1)), float(found.group(2)), " ".join(argv[1:])


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument("--tool", type=Path, required=True, help="the llama-perplexity binary")
    p.add_argument("--text", type=Path, help="a UTF-8 text file (default: stdlib-text held out)")
    p.add_argument("--ctx", type=int, default=128)
    p.add_argument("--chunks", type=int, default=64)
    p.add_argument("--precision", default="fp32,w8,w4")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)

    import llama_cpp
    from tokenizers import Tokenizer

    text = args.text.read_text(encoding="utf-8") if args.text else held_out_text()
    ids = np.asarray(
        Tokenizer.from_file(str(args.checkpoint / "tokenizer.json")).encode(text).ids,
        dtype=np.int64,
    )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        text_file = workdir / "held-out.txt"
        text_file.write_text(text, encoding="utf-8")
        for precision in args.precision.split(","):
            gen = generator(args.checkpoint, precision, args.ctx, args.threads, workdir)
            if not rows:  # one tokenizer check: the GGUF's vocabulary is the same each time
                theirs = gen._llm.tokenize(text.encode(), add_bos=False, special=False)
                same = np.array_equal(np.asarray(theirs), ids)
                print(f"tokens: {len(ids)} (checkpoint tokenizer), {len(theirs)} (llama.cpp); "
                      f"identical: {same}")  # fmt: skip
                if not same:
                    return 1
            kv = "f32" if precision == "fp32" else "f16"  # as the rung keeps its cache
            t = time.perf_counter()
            ours = stackcost_ppl(gen, ids, args.ctx, args.chunks)
            ours_s = time.perf_counter() - t
            t = time.perf_counter()
            theirs_ppl, theirs_err, command = tool_ppl(
                args.tool, gen._path, text_file, args.ctx, args.chunks, args.threads, kv
            )
            tool_s = time.perf_counter() - t
            row = {
                "precision": precision,
                "gguf": gen._path.name,
                "kv_cache": kv,
                "stackcost_ppl": ours,
                "llama_perplexity_ppl": theirs_ppl,
                "llama_perplexity_pm": theirs_err,
                "relative_difference": ours / theirs_ppl - 1,
                "stackcost_s": ours_s,
                "llama_perplexity_s": tool_s,
                "llama_perplexity_command": command,
            }
            rows.append(row)
            print(
                f"{precision:5} {gen._path.name:18} stackcost {ours:.4f}  llama-perplexity "
                f"{theirs_ppl:.4f} ± {theirs_err:.4f}  difference {row['relative_difference']:+.2e}"
            )
    record = {
        "checkpoint": str(args.checkpoint),
        "llama_cpp_python": llama_cpp.__version__,
        "ctx": args.ctx,
        "chunks": args.chunks,
        "tokens_scored_per_chunk": args.ctx - 1 - args.ctx // 2,
        "threads": args.threads,
        "text": str(args.text)
        if args.text
        else "stdlib-text held-out files, raw, joined by newlines",
        "rows": rows,
    }
    if args.json:
        args.json.write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
