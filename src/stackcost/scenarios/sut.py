"""The system under test: a backend's prepared steps, driven by MLPerf's LoadGen.

LoadGen schedules the queries (SingleStream back to back, MultiStream N samples a query,
Server Poisson arrivals, Offline one large query), times them and computes the
percentiles; this module only answers them. A LoadGen sample is one call of a prepared
step on the cell's batch: the step's input was placed by `prepare`, so the QSL's few
indices all address that one pre-made batch (no inference here reads the values).

With one instance and a stream scenario the step runs inside issue_queries (LoadGen
issues the next query only once this one is complete, so a thread hand-off would only add
latency). Otherwise issue_queries queues the samples and returns at once, as Server's
scheduler needs, and one thread per instance takes them from the queue.

Instance 0 is served by the thread that warmed it and ran the timed loop: the worker's
main thread, while LoadGen runs on a thread of its own (it issues queries from the thread
that starts the test). Why: each thread that runs torch ops gets its own OpenMP team, and
with more OpenMP threads than cores libgomp stops spinning between parallel regions.
Measured on 2 cores, resnet18 b1 64 px eager at 2 threads: 13 ms a step on the main
thread, 21 ms on a second thread (the same as OMP_WAIT_POLICY=passive everywhere), which
made eager's Server latencies those of a step the timed loop never measures. Instances
beyond the first are served by threads of their own, each with its own team: that is
what several instances in one process cost.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from stackcost.cell import ScenarioConfig
from stackcost.result import ScenarioResult
from stackcost.scenarios.settings import (
    KINDS,
    SERVER_START_BACKOFF,
    peak_precision,
    planned,
    test_settings,
)
from stackcost.scenarios.summary import read_result

# Indices the QSL reports: LoadGen draws sample indices from them (all the same batch).
QSL_SAMPLES = 8
STOP = None  # what ends a serving thread


class StepServer:
    """Answers LoadGen's queries with `steps`, inline or from one thread per step."""

    def __init__(self, steps: Sequence[Callable[..., Any]], inline: bool) -> None:
        import mlperf_loadgen as lg

        self.lg = lg
        self.steps = list(steps)
        self.inline = inline
        self.failure: BaseException | None = None  # the first step that raised
        self.work: queue.SimpleQueue[Any] = queue.SimpleQueue()
        # Instance 0 is served by the caller's thread (serve_here); the others by these.
        self.threads = [
            threading.Thread(target=self._serve, args=(step,), daemon=True, name=f"sut-{i}")
            for i, step in enumerate(self.steps[1:], start=1)
        ]

    def __enter__(self) -> StepServer:
        if not self.inline:
            for t in self.threads:
                t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.inline:
            self.stop()  # again, should this thread have left serve_here by an exception
            for t in self.threads:
                t.join()

    def serve_here(self) -> None:
        """Serve instance 0 on this thread until stop() (the LoadGen test has ended)."""
        self._serve(self.steps[0])

    def stop(self) -> None:
        """End every serving thread: one STOP each, as any of them may take any STOP."""
        for _ in self.steps:
            self.work.put(STOP)

    def _answer(self, step: Callable[..., Any], sample_id: int, index: int) -> None:
        """One sample: run the step, and always complete it (LoadGen would wait forever
        for a sample that is never completed); a failure is raised after the test."""
        output = None  # held until completed: the response may point into it
        try:
            output = self.run_sample(step, sample_id, index)
        except BaseException as exc:  # noqa: BLE001 - re-raised by run_scenario
            if self.failure is None:
                self.failure = exc
        self.lg.QuerySamplesComplete([self.response(sample_id, output)])

    def run_sample(self, step: Callable[..., Any], sample_id: int, index: int) -> Any:
        """Sample `index` through one instance's step: every index is the same batch."""
        return step()

    def response(self, sample_id: int, output: Any) -> Any:
        """The sample's completion: no data, as nothing reads outputs back through LoadGen
        (they are verified against eager's before the test)."""
        return self.lg.QuerySampleResponse(sample_id, 0, 0)

    def _serve(self, step: Callable[..., Any]) -> None:
        while (sample := self.work.get()) is not STOP:
            self._answer(step, *sample)

    def issue_queries(self, samples: list[Any]) -> None:
        if self.inline:
            for s in samples:
                self._answer(self.steps[0], s.id, s.index)
            return
        for s in samples:
            self.work.put((s.id, s.index))

    def flush_queries(self) -> None:
        """Nothing is batched here, so nothing waits to be flushed."""


def run_scenario(
    config: ScenarioConfig,
    steps: Sequence[Callable[..., Any]],
    step_ns: float,
    outdir: Path,
    server: type[StepServer] = StepServer,
    tokens: bool = False,
) -> ScenarioResult:
    """One LoadGen test of `config` over warm `steps` (one per instance), answered by
    `server`; LoadGen's logs go to `outdir`, and its summary becomes the result. Server's
    peak search is started again lower when its start already broke the bound (LoadGen
    searches upward only). `tokens`: the server reports first tokens and token counts,
    and LoadGen measures token latencies (scenarios/token_serving.py)."""
    plan = planned(config, step_ns)
    if tokens:
        plan["use_token_latencies"] = True
    for attempt in range(KINDS[config.name].tries):
        if attempt:  # the peak search's start broke the bound: start lower
            plan["server_target_qps"] /= SERVER_START_BACKOFF
            plan["server_find_peak_qps_decimals_of_precision"] = peak_precision(
                plan["server_target_qps"]
            )
        plan["attempt"] = attempt + 1
        result = _one_test(config, steps, plan, outdir, server, tokens)
        if result.value is not None:
            break
    return result


def _one_test(
    config: ScenarioConfig,
    steps: Sequence[Callable[..., Any]],
    plan: dict[str, Any],
    outdir: Path,
    server_type: type[StepServer],
    tokens: bool,
) -> ScenarioResult:
    import mlperf_loadgen as lg

    outdir.mkdir(parents=True, exist_ok=True)
    settings = test_settings(config, plan)
    log = lg.LogSettings()
    log.log_output.outdir = os.fspath(outdir)
    log.log_output.copy_summary_to_stdout = False
    log.enable_trace = False  # the trace is large and nothing here reads it
    inline = len(steps) == 1 and KINDS[config.name].streams
    with server_type(steps, inline) as server:

        def test() -> None:
            sut = lg.ConstructSUT(server.issue_queries, server.flush_queries)
            qsl = lg.ConstructQSL(QSL_SAMPLES, QSL_SAMPLES, _nothing, _nothing)
            try:
                lg.StartTestWithLogSettings(sut, qsl, settings, log)
            finally:
                lg.DestroyQSL(qsl)
                lg.DestroySUT(sut)

        if inline:  # LoadGen calls the step from this thread
            test()
        else:  # LoadGen on its own thread; instance 0 on this one (see the docstring)
            loadgen = _Background(test, server.stop)
            server.serve_here()
            loadgen.join()
    if server.failure is not None:
        raise server.failure
    return read_result(outdir, config.name, plan, len(steps), tokens)


class _Background(threading.Thread):
    """`run` on a thread of its own, `then` called however it ends; join() re-raises."""

    def __init__(self, run: Callable[[], None], then: Callable[[], None]) -> None:
        super().__init__(daemon=True, name="loadgen")
        self._job, self._then = run, then
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self._job()
        except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
            self.error = exc
        finally:
            self._then()

    def join(self, timeout: float | None = None) -> None:
        super().join(timeout)
        if self.error is not None:
            raise self.error


def _nothing(indices: list[int]) -> None:
    """Load/unload: the one batch each step reads is already in place."""
