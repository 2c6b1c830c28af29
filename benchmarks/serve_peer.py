"""Does stackcost's serving client agree with a client nobody here wrote?

GuideLLM (vLLM's project, `pip install guidellm`, in a venv of its own: it brings its
own transformers and torch) and stackcost's load generator (stackcost.serving.client)
drive the same running `llama-server`, started once by stackcost's own engine
(serving/engines/llamacpp_server.py) over the same GGUF, with the same lengths and the
same constant rates. For each load, the two clients take turns, the order alternating
round by round, so the machine's drift falls on both. Compared, per load:

- TTFT p50 and p90: first token at the client - request sent (both define it so);
- ITL: GuideLLM's inter-token latency is per request (last token - first) / (tokens - 1),
  which stackcost calls TPOT (its ITL pools every gap between arrivals): compared as TPOT
  p50 against GuideLLM's ITL p50;
- request throughput: completed requests over the load's time.

The HTTP cost on its own: each streamed answer's last event carries the server's own
timings (prefill `prompt_ms`, decode `predicted_ms` over `predicted_n` tokens). A
request's end-to-end time at the client minus those is what HTTP, JSON, server-sent
events, the server's HTTP thread and its slot scheduling add; the same per token, from
TPOT against `predicted_ms / predicted_n`. Measured one request at a time, unloaded.

The model is a seeded random Llama (a decoder of ~25M parameters: tens of ms a request on
one thread, long against what a client adds) with a byte-level BPE learnt from the
Python standard library's text (stackcost's stdlib-text tokenizer), so that GuideLLM's
text prompts are the token counts asked: GuideLLM sends text, stackcost token ids.

    python benchmarks/serve_peer.py --guidellm /path/to/venv/bin/guidellm \\
        [--server llama-server] [--prompt 64] [--output 32] [--seconds 15] [--rounds 2] \\
        [--loads one,0.5,1.0,1.5] [--json benchmarks/results/serve_peer.json]

A load is `one` (one request at a time: GuideLLM's synchronous profile) or a multiple of
the one-at-a-time rate (constant arrivals). The server runs one thread on one core, and
both clients on the other (GuideLLM's worker processes included), so neither client's
own CPU slows the server it times. Run it alone: it is a timing benchmark.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from stackcost.env import collect, now
from stackcost.serving.arrivals import schedule
from stackcost.serving.client import Drive, drive, one_at_a_time
from stackcost.serving.engine import Request
from stackcost.serving.engines.llamacpp_server import LlamaServerEngine, find_server, tokens_so_far

AGREE = 0.05  # a ratio within 5% agrees; one beyond is explained in the notes
FIGURES = ("ttft_p50", "ttft_p90", "itl_p50", "request_rps")


def build_model(folder: Path, seed: int) -> tuple[Path, Path]:
    """A checkpoint folder (config, weights, tokenizer) and its GGUF."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from stackcost.data.stdlib_text import END_OF_TEXT, corpus, train_tokenizer
    from stackcost.generation.gguf import write_gguf

    vocab = 2048
    tokenizer = train_tokenizer(corpus(), vocab)
    checkpoint = folder / "checkpoint"
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=END_OF_TEXT)
    fast.save_pretrained(checkpoint)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=512, intermediate_size=1376, num_hidden_layers=8,
        num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=2048,
        eos_token_id=tokenizer.token_to_id(END_OF_TEXT),
    )  # fmt: skip
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(checkpoint)
    gguf = folder / "model.gguf"
    write_gguf(model, gguf, checkpoint)
    return checkpoint, gguf


def requests(count: int, first: int, prompt: int, output: int, vocab: int) -> list[Request]:
    rng = np.random.default_rng(first)
    return [
        Request(first + i, tuple(int(t) for t in rng.integers(256, vocab, prompt)), output)
        for i in range(count)
    ]


def stackcost_figures(result: Drive) -> dict[str, float]:
    done = [r for r in result.records if r.complete]
    sent = min(r.sent_ns for r in result.records if r.sent_ns is not None)
    ttft = [r.ttft_ns / 1e6 for r in done]
    tpot = [t / 1e6 for r in done if (t := r.tpot_ns) is not None]
    late = [r.lateness_ns / 1e6 for r in result.records if r.sent_ns is not None]
    return {
        "late_p50_ms": float(np.percentile(late, 50)),
        "late_p90_ms": float(np.percentile(late, 90)),
        "ttft_p50": float(np.percentile(ttft, 50)),
        "ttft_p90": float(np.percentile(ttft, 90)),
        "itl_p50": float(np.percentile(tpot, 50)),
        "request_rps": len(done) / ((result.end_ns - sent) / 1e9),
        "requests": len(done),
    }


async def stackcost_load(
    engine: LlamaServerEngine, rate: float | None, args: argparse.Namespace, first: int
) -> dict[str, float]:
    """One load by stackcost's client: one at a time (rate None) or constant arrivals."""
    if rate is None:
        made = requests(100_000, first, args.prompt, args.output, args.vocab)
        result = await one_at_a_time(engine, made, limit_s=args.seconds)
    else:
        count = max(4, math.ceil(rate * args.seconds))
        made = requests(count, first, args.prompt, args.output, args.vocab)
        offsets = schedule(rate, count, "constant", first)
        result = await drive(engine, made, list(offsets), limit_s=args.seconds * 3)
    return stackcost_figures(result)


def guidellm_load(
    url: str, checkpoint: Path, rate: float | None, args: argparse.Namespace, out: Path
) -> dict[str, float]:
    """One load by GuideLLM: its synchronous profile, or a constant rate, for as long."""
    backend = {
        "kind": "openai_http", "target": url, "request_format": "/v1/completions",
        "http2": False, "extras": {"body": {"cache_prompt": False, "temperature": 0.0}},
    }  # fmt: skip
    profile = {"kind": "synchronous"} if rate is None else {"kind": "constant", "rate": rate}
    command = [
        args.guidellm, "run", "--backend", json.dumps(backend), "--profile", json.dumps(profile),
        "--constraint", f"kind=max_duration,seconds={args.seconds:g}",
        "--data", f"kind=synthetic_text,prompt_tokens={args.prompt},output_tokens={args.output}",
        "--tokenizer", f"kind=hf_auto,model={checkpoint}",
        "--output", f"kind=json,path={out}", "--disable-console",
    ]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, timeout=args.seconds * 10 + 120)
    bench = json.loads(out.read_text())["benchmarks"][0]
    metrics = bench["metrics"]

    def ok(name: str) -> dict[str, Any]:
        return metrics[name]["successful"]

    done = metrics["request_totals"]["successful"]
    late = metrics.get("request_dispatch_delay")  # s; none for the synchronous profile
    late_pct = late["successful"]["percentiles"] if late else {"p50": 0.0, "p90": 0.0}
    return {
        "late_p50_ms": late_pct["p50"] * 1e3,
        "late_p90_ms": late_pct["p90"] * 1e3,
        "ttft_p50": ok("time_to_first_token_ms")["percentiles"]["p50"],
        "ttft_p90": ok("time_to_first_token_ms")["percentiles"]["p90"],
        "itl_p50": ok("inter_token_latency_ms")["percentiles"]["p50"],
        "request_rps": done / bench["duration"],
        "requests": done,
        "prompt_tokens": ok("prompt_token_count")["median"],  # as the server counted them
        "output_tokens": ok("output_token_count")["median"],
    }


def server_counters(url: str) -> dict[str, float]:
    """llama-server's own counters (/metrics): what it did, whoever sent the requests."""
    import urllib.request

    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    values = {
        line.split()[0].removeprefix("llamacpp:"): float(line.split()[1])
        for line in text.splitlines()
        if line.startswith("llamacpp:")
    }
    # The busy-slots gauge is an average over every decode call so far: made a total.
    values["busy_slots_total"] = values["n_busy_slots_per_decode"] * values["n_decode_total"]
    return values


def server_side(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What the server did during one load: its own time per generated token (each
    request's, summed over slots, as the request lives it), its prefill time per prompt
    token, and how many requests each decode call batched on average."""
    d = {k: after[k] - before[k] for k in before}
    return {
        "tpot_ms": 1e3 * d["tokens_predicted_seconds_total"] / max(d["tokens_predicted_total"], 1),
        "prefill_ms_per_token": 1e3 * d["prompt_seconds_total"] / max(d["prompt_tokens_total"], 1),
        "busy_slots_per_decode": d["busy_slots_total"] / max(d["n_decode_total"], 1),
        "prompt_tokens": d["prompt_tokens_total"],
        "decodes": d["n_decode_total"],
    }


async def http_cost(engine: LlamaServerEngine, args: argparse.Namespace) -> dict[str, Any]:
    """What the client sees beyond the server's own compute, one request at a time: the
    end-to-end time less the server's prefill and decode, and the per-token time less its
    decode per token, from each streamed answer's own timings."""
    import aiohttp

    per_request, per_token = [], []
    made = requests(args.http_requests, 10**7, args.prompt, args.output, args.vocab)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, force_close=True)
    ) as session:
        for request in made:
            body = {
                "prompt": list(request.prompt), "max_tokens": request.new_tokens,
                "temperature": 0.0, "ignore_eos": True, "stream": True, "cache_prompt": False,
            }  # fmt: skip
            arrivals, timings, tokens = [], None, 0
            sent = time.perf_counter()
            async with session.post(engine.url + "/v1/completions", json=body) as r:
                async for line in r.content:
                    if not line.startswith(b"data: ") or line[6:].strip() == b"[DONE]":
                        continue
                    event = json.loads(line[6:])
                    if event.get("timings"):
                        timings = event["timings"]
                    if (count := tokens_so_far(event, tokens)) > tokens:
                        arrivals.append(time.perf_counter())
                        tokens = count
            assert timings is not None and tokens == request.new_tokens, (timings, tokens)
            server_ms = timings["prompt_ms"] + timings["predicted_ms"]
            per_request.append((arrivals[-1] - sent) * 1e3 - server_ms)
            client_tpot = (arrivals[-1] - arrivals[0]) * 1e3 / (tokens - 1)  # as stackcost's
            per_token.append(client_tpot - timings["predicted_ms"] / timings["predicted_n"])
    return {
        "requests": len(per_request),
        "per_request_ms": {
            "p50": statistics.median(per_request),
            "mean": statistics.fmean(per_request),
        },
        "per_token_ms": {"p50": statistics.median(per_token), "mean": statistics.fmean(per_token)},
        "definition": "client end-to-end - (server prompt_ms + predicted_ms); client TPOT - "
        "server predicted_ms / predicted_n; streamed, a connection per request, unloaded",
    }


async def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    console = Console(stderr=True)
    console.print("building the model and its GGUF…")
    checkpoint, gguf = build_model(workdir, args.seed)
    binary = find_server(args.server)
    if binary is None:
        sys.exit(f"llama-server {args.server!r} not found (README: Serving decoders)")
    context = -(-(args.prompt + args.output) // 256) * 256
    engine = LlamaServerEngine(
        binary, gguf, 1, args.slots, context, "f32", workdir / "llama-server.log"
    )
    # The server on one core and every client on the other: GuideLLM's worker processes
    # and stackcost's event loop then take nothing from the server they time. The server
    # inherits the core it starts on (its threads with it); this process moves after.
    os.sched_setaffinity(0, {args.server_core})
    await engine.start()
    os.sched_setaffinity(0, {args.client_core})
    try:
        await stackcost_load(engine, None, argparse.Namespace(**{**vars(args), "seconds": 3}), 0)
        single = (await stackcost_load(engine, None, args, 1))["request_rps"]
        loads = [None if x == "one" else float(x) * single for x in args.loads.split(",")]
        console.print(f"one at a time: {single:.3g} req/s; loads {loads}")
        rows: list[dict[str, Any]] = []
        for rnd in range(args.rounds):
            for i, rate in enumerate(loads):
                order = (
                    ("stackcost", "guidellm") if (rnd + i) % 2 == 0 else ("guidellm", "stackcost")
                )
                got: dict[str, dict[str, Any]] = {}
                for client in order:
                    before = await asyncio.to_thread(server_counters, engine.url)
                    if client == "stackcost":
                        got[client] = await stackcost_load(engine, rate, args, 100 * (rnd + 1) + i)
                    else:
                        out = workdir / f"guidellm-{rnd}-{i}.json"
                        got[client] = await asyncio.to_thread(
                            guidellm_load, engine.url, checkpoint, rate, args, out
                        )
                    after = await asyncio.to_thread(server_counters, engine.url)
                    got[client]["server"] = server_side(before, after)
                label = "one at a time" if rate is None else f"{rate:.3g} req/s"
                rows.append({"load": label, "rate": rate, "round": rnd, "order": order, **got})
                console.print(f"round {rnd} {label}: " + ", ".join(
                    f"{f} {got['stackcost'][f] / got['guidellm'][f]:.3f}" for f in FIGURES
                ))  # fmt: skip
        cost = await http_cost(engine, args)
    finally:
        await engine.stop()
    return {"single_rps": single, "rows": rows, "http_cost": cost, "server": engine.details}


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per load, each figure's stackcost / GuideLLM ratio: the median over rounds."""
    out = []
    for load in dict.fromkeys(r["load"] for r in rows):
        mine = [r for r in rows if r["load"] == load]
        ratios = {
            f: statistics.median(r["stackcost"][f] / r["guidellm"][f] for r in mine)
            for f in FIGURES
        }
        server = {
            c: {
                k: statistics.median(r[c]["server"][k] for r in mine)
                for k in ("tpot_ms", "prefill_ms_per_token", "busy_slots_per_decode")
            }
            | {k: statistics.median(r[c][k] for r in mine) for k in ("late_p50_ms", "late_p90_ms")}
            for c in ("stackcost", "guidellm")
        }
        server_ratio = server["stackcost"]["tpot_ms"] / server["guidellm"]["tpot_ms"]
        out.append({
            "load": load, "ratios": ratios, "server": server,
            # The ITL ratio less what the server's own time per token explains: the
            # clients' measurements, apart from the loads they made.
            "itl_ratio_beyond_server": ratios["itl_p50"] / server_ratio,
            "stackcost": {f: statistics.median(r["stackcost"][f] for r in mine) for f in FIGURES},
            "guidellm": {f: statistics.median(r["guidellm"][f] for r in mine) for f in FIGURES},
            "beyond_5pct": [f for f, v in ratios.items() if abs(v - 1) > AGREE],
        })  # fmt: skip
    return out


def show(record: dict[str, Any]) -> None:
    table = Table(
        title="stackcost's client / GuideLLM's, same llama-server (median over rounds)",
        caption_justify="left",
    )
    columns = (
        "load", "TTFT p50", "TTFT p90", "ITL p50", "req/s", "ITL beyond server",
        "server ms/token sc / gl", "slots a decode sc / gl", "late p90 ms sc / gl",
    )  # fmt: skip
    for col in columns:
        table.add_column(col)
    for s in record["summary"]:
        r, sv = s["ratios"], s["server"]
        table.add_row(
            s["load"], *(f"{r[f]:.3f}" for f in FIGURES), f"{s['itl_ratio_beyond_server']:.3f}",
            f"{sv['stackcost']['tpot_ms']:.2f} / {sv['guidellm']['tpot_ms']:.2f}",
            f"{sv['stackcost']['busy_slots_per_decode']:.2f} / "
            f"{sv['guidellm']['busy_slots_per_decode']:.2f}",
            f"{sv['stackcost']['late_p90_ms']:.2f} / {sv['guidellm']['late_p90_ms']:.2f}",
        )  # fmt: skip
    cost = record["http_cost"]
    table.caption = (
        "ratios: stackcost / GuideLLM (ITL: GuideLLM's per-request ITL, stackcost's TPOT); "
        "ITL beyond server: the ITL ratio over the server's own ms/token ratio; sc, gl: "
        "during stackcost's and GuideLLM's loads; late: sent after the schedule\n"
        f"HTTP cost on its own: {cost['per_request_ms']['p50']:.2f} ms a request, "
        f"{cost['per_token_ms']['p50']:.3f} ms a token (p50 of {cost['requests']})"
    )
    Console().print(table)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--guidellm", required=True, help="the guidellm executable (its own venv)")
    p.add_argument(
        "--server", default="llama-server", help="llama-server: a path or a name on PATH"
    )
    p.add_argument("--prompt", type=int, default=64, help="prompt tokens (default 64)")
    p.add_argument("--output", type=int, default=32, help="output tokens (default 32)")
    p.add_argument("--slots", type=int, default=4, help="the server's parallel slots (default 4)")
    p.add_argument("--seconds", type=float, default=15.0, help="each load's time (default 15)")
    p.add_argument("--rounds", type=int, default=2, help="rounds over the loads (default 2)")
    p.add_argument("--loads", default="one,0.5,1.0,1.5", help="one, and multiples of its rate")
    p.add_argument("--http-requests", type=int, default=50, help="requests timing HTTP's cost")
    p.add_argument("--server-core", type=int, default=0, help="the server's core (default 0)")
    p.add_argument("--client-core", type=int, default=1, help="the clients' core (default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, help="write the record here")
    args = p.parse_args(argv)
    args.vocab = 2048
    with tempfile.TemporaryDirectory() as tmp:
        measured = asyncio.run(measure(args, Path(tmp)))
    record = {
        "benchmark": "serve_peer",
        "finished_at": now(),
        "machine": {k: collect([1])[k] for k in ("cpu", "isa_caps", "stackcost_git", "versions")},
        "settings": {k: v for k, v in vars(args).items() if k != "json"}
        | {"guidellm": args.guidellm},
        "guidellm_version": subprocess.run(
            [args.guidellm, "--version"], capture_output=True, text=True
        ).stdout.strip(),
        **measured,
        "summary": summary(measured["rows"]),
    }
    show(record)
    if args.json:
        args.json.write_text(json.dumps(record, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
