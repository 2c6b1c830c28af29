"""The training worker hands a native level the whole run and stores what it answers.

In-process run_task (so the session's build cache applies), a real C++ program, digits.
"""

from __future__ import annotations

import math

import pytest

from stackcost.api.training_weights import save_initial_weights
from stackcost.execute.worker import run_task
from stackcost.result import MEASURED_STATUSES
from stackcost.runspec.train import TrainSpec
from stackcost.scenarios.task import TrainTask


def _spec(backend: str) -> TrainSpec:
    from stackcost.cell import TrainConfig
    from stackcost.runspec.run import model_ref

    return TrainSpec(
        model=model_ref("resnet18", num_classes=10, in_channels=1),
        backends=[backend],
        train=TrainConfig(dataset="digits", epochs=2, lr=0.002, limit=96),
        batch_size=16,
        resolution=32,
        threads=[1],
    )


def _train(backend: str, tmp_path) -> object:
    spec = _spec(backend)
    weights, digest = save_initial_weights(spec, tmp_path)
    task = TrainTask(
        cell=spec.cells()[0],
        workdir=str(tmp_path / backend),
        weights_path=weights,
        weights_digest=digest,
    )
    return run_task(task)


@pytest.fixture(scope="module")
def eager(tmp_path_factory) -> object:
    """Eager's level of the same run, trained once: the reference of both native levels
    (asked for after the build, so a machine without the toolchain skips before it)."""
    return _train("eager", tmp_path_factory.mktemp("eager"))


@pytest.mark.slow
@pytest.mark.parametrize(
    "backend, build", [("libtorch", "native_build"), ("onednn", "onednn_build")]
)
def test_native_level_trains_through_the_worker(backend, build, request, tmp_path):
    request.getfixturevalue(build)  # the session's program, in its own cache
    native, eager = _train(backend, tmp_path), request.getfixturevalue("eager")
    assert native.status in MEASURED_STATUSES, (native.reason, native.log_tail)
    assert [e.epoch for e in native.epochs] == [1, 2]
    for n, e in zip(native.epochs, eager.epochs, strict=True):
        # Same data, same batches: the same counts at both levels.
        assert (n.steps, n.train_samples, n.eval_samples) == (
            e.steps,
            e.train_samples,
            e.eval_samples,
        )
        assert math.isfinite(n.train_loss) and n.eval_accuracy is not None
    # The first epoch's mean loss agrees loosely: fp32 drift grows step by step.
    assert native.epochs[0].train_loss == pytest.approx(eager.epochs[0].train_loss, rel=0.02)
    assert native.stats is not None and len(native.samples_ns) == native.stats.n
    assert native.cold_start_ms and native.throughput and native.memory.peak_rss_bytes > 0
    assert native.details["loop"] == "in the C++ program"
    assert native.details["data"]["train_samples"] == 96
