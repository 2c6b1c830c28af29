"""The llama.cpp rung served by llama.cpp's own server: `llama-server` over the GGUF the
rung wrote and verified, started by stackcost on a free loopback port and stopped after.

The server batches requests in parallel slots (continuous batching across slots). The
client streams each request from its OpenAI-compatible `/v1/completions` endpoint over
HTTP (aiohttp), one server-sent event per token (a token that ends inside a UTF-8
character comes with the next: the last event's timings count them all), so the load
generator's stamps include what a real client pays: HTTP, JSON, the server's own threads. The prompt goes as token
ids (no tokenizer in the way); greedy (temperature 0), `ignore_eos`, exactly max_tokens.
The server's running and deferred requests are read from its `/metrics` every 100 ms.

`llama-server` is not in llama-cpp-python's wheel. Build it from the sdist's sources, as
benchmarks/llamacpp_perplexity.py builds llama-perplexity (docs/guides/serve.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from stackcost.serving.engine import Engine, EngineDied, Request

READY_TIMEOUT_S = 120.0
METRICS_EVERY_S = 0.1
BUILD = (
    "build llama-server from llama-cpp-python's sdist: pip download --no-binary :all: --no-deps "
    "llama-cpp-python==VERSION, then in vendor/llama.cpp: cmake -B build -DLLAMA_CURL=OFF "
    "-DBUILD_SHARED_LIBS=OFF && cmake --build build --target llama-server; give its path "
    "with -o llama.cpp.server=PATH"
)


def find_server(given: str) -> str | None:
    """The llama-server binary: a path given, or the name found on PATH."""
    if "/" in given:
        return given if Path(given).is_file() else None
    return shutil.which(given)


def tokens_so_far(event: dict[str, Any], sent: int) -> int:
    """The tokens a streamed event brings the request to. An event before the last is one
    token as the client sees it; the server holds back a token that ends inside a UTF-8
    character (a byte-level BPE's) and sends it with the next, so the last event, whose
    timings count every token generated (`predicted_n`), brings the count up to them.
    (Per-token timings would count each event's, at 3% of the server's decode time.)"""
    choices = event.get("choices") or [{}]
    if choices[0].get("finish_reason") is None:
        return sent + 1
    return max(sent, int((event.get("timings") or {}).get("predicted_n", sent)))


class LlamaServerEngine(Engine):
    batching = "parallel slots (llama.cpp server)"
    transport = "HTTP on loopback (OpenAI-compatible /v1/completions, streamed)"

    def __init__(
        self,
        binary: str,
        gguf: Path,
        threads: int,
        slots: int,
        ctx_per_slot: int,
        kv_type: str,
        log: Path,
    ) -> None:
        super().__init__()
        self.binary, self.gguf, self.threads, self.slots = binary, gguf, threads, slots
        self.ctx_per_slot, self.kv_type, self.log = ctx_per_slot, kv_type, log
        self.process: asyncio.subprocess.Process | None = None
        self.session: Any = None
        self.url = ""
        self._poller: asyncio.Task | None = None
        self._running: int | None = None
        self._deferred: int | None = None

    async def start(self) -> None:
        import aiohttp

        with socket.socket() as s:  # a free port (the server binds it a moment later)
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        command = [
            self.binary, "-m", str(self.gguf), "--host", "127.0.0.1", "--port", str(port),
            "-np", str(self.slots), "-c", str(self.ctx_per_slot * self.slots),
            "-t", str(self.threads), "-tb", str(self.threads), "-ctk", self.kv_type,
            "-ctv", self.kv_type, "-fa", "off", "--metrics", "--no-webui",
        ]  # fmt: skip
        with self.log.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                *command, stdout=log, stderr=log, stdin=asyncio.subprocess.DEVNULL
            )
        # Unlimited connections: every request in flight has its own, as clients would. A
        # fresh connection per request: the server closes idle keep-alive connections,
        # and a request written to a closed one fails ("Can not write request body").
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, force_close=True),
            timeout=aiohttp.ClientTimeout(total=None),
        )
        await self._wait_ready()
        self.details = {
            "server": self.binary,
            "command": command,
            "url": self.url,
            "slots": self.slots,
        }
        self._poller = asyncio.create_task(self._poll_metrics())

    async def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process is not None and self.process.returncode is not None:
                raise RuntimeError(
                    f"llama-server exited with {self.process.returncode}: {self._tail()}"
                )
            with contextlib.suppress(OSError, asyncio.TimeoutError):
                async with self.session.get(self.url + "/health") as r:
                    if r.status == 200:
                        return
            await asyncio.sleep(0.1)
        raise RuntimeError(
            f"llama-server did not answer /health in {READY_TIMEOUT_S:g} s: {self._tail()}"
        )

    def _tail(self) -> str:
        try:
            lines = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return lines[-1] if lines else ""

    async def stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
            self._poller = None
        if self.session is not None:
            await self.session.close()
            self.session = None
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), 10)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        self.process = None

    def _died(self, exc: BaseException) -> BaseException:
        if self.process is None or self.process.returncode is not None:
            code = None if self.process is None else self.process.returncode
            return EngineDied(f"llama-server exited ({code}): {self._tail()}")
        return exc

    async def stream(self, request: Request) -> AsyncIterator[int]:
        import aiohttp

        body = {
            "prompt": list(request.prompt), "max_tokens": request.new_tokens, "temperature": 0.0,
            "ignore_eos": True, "stream": True, "cache_prompt": False,
        }  # fmt: skip
        try:
            async with self.session.post(self.url + "/v1/completions", json=body) as r:
                if r.status != 200:
                    raise RuntimeError(f"HTTP {r.status}: {(await r.text())[:200]}")
                sent = 0
                async for line in r.content:
                    if not line.startswith(b"data: "):
                        continue
                    data = line[6:].strip()
                    if data == b"[DONE]":
                        return
                    if (count := tokens_so_far(json.loads(data), sent)) > sent:
                        yield count - sent
                        sent = count
        except (aiohttp.ClientConnectionError, ConnectionError) as exc:
            raise self._died(exc) from exc

    async def greedy(self, prompt: list[int], new_tokens: int) -> list[int]:
        body = {
            "prompt": prompt, "n_predict": new_tokens, "temperature": 0.0, "ignore_eos": True,
            "return_tokens": True, "cache_prompt": False,
        }  # fmt: skip
        async with self.session.post(self.url + "/completion", json=body) as r:
            answer = await r.json()
        return [int(t) for t in answer["tokens"]]

    async def _poll_metrics(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                async with self.session.get(self.url + "/metrics") as r:
                    text = await r.text()
                for line in text.splitlines():
                    if line.startswith("llamacpp:requests_processing"):
                        self._running = int(float(line.split()[-1]))
                    elif line.startswith("llamacpp:requests_deferred"):
                        self._deferred = int(float(line.split()[-1]))
            await asyncio.sleep(METRICS_EVERY_S)

    def running(self) -> int | None:
        return self._running

    def queued(self) -> int | None:
        return self._deferred
