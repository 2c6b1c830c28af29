"""Held-out accuracy of trained weights on each rung and precision (`stackcost heldout`).

Verification on random weights says how far a quantized output is from fp32's; whether
quantization costs accuracy needs weights that learned something. The weights `stackcost
train --keep-weights` kept go through each rung's `prepare`, as a measured cell's do (a
quantized precision calibrating on batches of the dataset's training split, never the
test split), and the prepared model's `infer` runs over the whole test split in batches of
the cell's size. A quantized answer is judged by its precision's rule (axes.QuantRule):
top-1 agreement with eager fp32's predictions, and the accuracy drop below the same rung's
fp32, in points.

A split is finite (digits holds out 360 samples: 5 flips are 1.4 points of agreement), so
each rule is stated with its interval: `wrong` only when the interval lies wholly outside
the rule (the split shows the rung breaks it), `undecided` when the observed value misses
the rule but its interval does not exclude it, `ok` when each observed value meets its
rule, the reason naming an interval that still reaches past the bound (360 samples show
99% agreement beyond doubt only with no flip; MNIST's 10000 decide where digits' 360
cannot). Agreement has an exact (Clopper-Pearson) interval; the drop, a paired difference,
Tango's score interval (Tango 1998), which also counts the uncertainty in how many samples
change at all: an interval conditional on the observed discordant pairs (as McNemar's test
conditions) read "0.0 pt [0.0, 0.0]" for a rung with no flip and put the upper bound at the
observed drop whenever nothing was gained. Each bound is one-sided 95%: a rung that meets
the rule is called `wrong` by mistake about 5% of the time (the two bounds make a 90%
interval; Tango's is a score interval, not exact: its lower bound missed a true 1 pt drop
in 5.0-6.9% of simulated splits of 360, tests/scenarios/test_heldout_rule.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from stackcost.axes import QUANTIZED

if TYPE_CHECKING:
    import torch

    from stackcost.backends.base import Backend
    from stackcost.cell import Cell
    from stackcost.data.splits import Split
    from stackcost.quantize import Calibration
    from stackcost.workload import Example

REFERENCE = ("eager", "fp32")  # whose predictions every other answer is compared with
# Another rung's fp32 runs the same weights: it must decide as eager does, up to rounding.
FP32_MIN_TOP1 = 0.99
FP32_MAX_DROP_PT = 1.0
# Two-sided level of the rules' intervals: each bound one-sided 95% (the module docstring).
CONFIDENCE = 0.90
# Training-split samples a static precision calibrates on: real images, a few batches.
CALIBRATION_SAMPLES = 256


@dataclass(frozen=True)
class Heldout:
    """One rung and precision on the test split. `status`: ok (every rule's interval inside
    it), wrong (a rule's interval wholly outside it), undecided (an interval straddles a
    bound), unsupported (the rung cannot build it), failed (an exception, in `reason`)."""

    backend: str
    precision: str
    status: str
    reason: str = ""
    samples: int = 0
    accuracy: float | None = None  # top-1 against the labels, a fraction
    fp32_accuracy: float | None = None  # the same rung's fp32 (eager's when that one failed)
    top1: float | None = None  # agreement with eager fp32's predictions, a fraction
    drop_pt: float | None = None  # (fp32_accuracy - accuracy) x 100
    rule: str = ""
    # The rules' intervals at CONFIDENCE (the module docstring says how each is made).
    top1_low: float | None = None
    top1_high: float | None = None
    drop_low_pt: float | None = None
    drop_high_pt: float | None = None

    def record(self) -> dict[str, Any]:
        """As details["heldout"] holds it (report.frames.quant.heldout_drop_pt reads it)."""
        return asdict(self)


@dataclass(frozen=True)
class _Answer:
    backend: str
    precision: str
    predictions: np.ndarray | None = None
    status: str = ""  # unsupported or failed; "" when it answered
    reason: str = ""


def evaluate(
    cell: Cell,
    weights: Path,
    backends: list[str],
    precisions: list[str],
    batch: int,
    workdir: Path,
    data_dir: str | None = None,
    calibration_samples: int = CALIBRATION_SAMPLES,
    on_start: Callable[[str, str], None] | None = None,
) -> list[Heldout]:
    """Every backend x precision of `cell`'s model (a train cell: its model, sizes and
    dataset) with the state_dict at `weights`, on the test split. Eager fp32 is always
    evaluated first (the reference), and fp32 on every rung (its drop's baseline)."""
    import torch

    from stackcost import zoo
    from stackcost.data.splits import load_splits

    workload = zoo.workload_of(cell.model)
    splits = load_splits(cell, workload, data_dir)
    state = torch.load(weights, weights_only=True)
    calibration = training_batches(splits["train"], batch, calibration_samples, cell)
    return evaluate_split(
        cell, state, splits["test"], calibration, backends, precisions, batch, workdir, on_start
    )


def evaluate_split(
    cell: Cell,
    state: dict[str, torch.Tensor] | None,
    test: Split,
    calibration: Calibration,
    backends: list[str],
    precisions: list[str],
    batch: int,
    workdir: Path,
    on_start: Callable[[str, str], None] | None = None,
) -> list[Heldout]:
    """Every backend x precision of `cell`'s model on `test`, judged: the model built from
    its reference with `state` loaded over it (None: the weights it is built with, a
    checkpoint's own); a static precision calibrating on `calibration`."""
    from stackcost.backends.artifacts import ArtifactCache

    order = [REFERENCE[0], *(b for b in backends if b != REFERENCE[0])]
    wanted = ["fp32", *(p for p in precisions if p != "fp32")]
    cache = ArtifactCache(workdir / "artifacts")  # one ONNX export for ORT and OpenVINO
    answers: list[_Answer] = []
    for name in order:
        for precision in wanted if name in backends else ["fp32"]:
            if on_start is not None:
                on_start(name, precision)
            answers.append(
                _answer(name, precision, cell, state, calibration, test, batch, workdir, cache)
            )
    judged = judge(answers, test.labels.numpy())
    return [h for h in judged if h.backend in backends and h.precision in precisions]


def training_batches(train: Split, batch: int, samples: int, cell: Cell) -> Calibration:
    """The first `samples` of the training split (at least one batch), in batches of
    `batch`: what a static precision calibrates on."""
    from stackcost.data.splits import Batches
    from stackcost.quantize import Calibration

    batches = Batches(train, batch, drop_last=True)
    count = max(1, min(len(batches), -(-samples // batch)))
    index = batches.order(None)
    examples = [batches.get(index, i)[0] for i in range(count)]
    dataset = cell.train.dataset if cell.train else "the dataset"
    return Calibration(
        examples,
        f"{dataset} training split: its first {count * batch} samples, in stored order",
    )


def heldout_batches(test: Split, batch: int) -> list[tuple[Example, int]]:
    """The test split in batches of exactly `batch` (the rungs are built for one shape):
    the last one padded by repeating its last sample; each with its count of real rows."""
    import torch

    from stackcost.data.splits import Batches

    batches = Batches(test, batch, drop_last=False)
    index = batches.order(None)
    out = []
    for i in range(len(batches)):
        x, y = batches.get(index, i)
        rows = len(y)

        def pad(t: torch.Tensor, rows: int = rows) -> torch.Tensor:
            extra = t[-1:].expand(batch - rows, *t.shape[1:])
            return torch.cat([t, extra]) if rows < batch else t

        out.append((x.map(pad), rows))
    return out


def _answer(
    name: str,
    precision: str,
    cell: Cell,
    state: dict[str, torch.Tensor] | None,
    calibration: Calibration,
    test: Split,
    batch: int,
    workdir: Path,
    cache: Any,
) -> _Answer:
    """One rung and precision's predictions on the test split, or why there are none."""
    from stackcost.backends import load_backend
    from stackcost.backends.base import Unsupported
    from stackcost.clip import one_line

    try:
        backend = load_backend(name)
        available = backend.available()
        if not available.ok:
            return _Answer(name, precision, status="unsupported", reason=available.reason)
        infer_cell = cell.model_copy(
            update={
                "backend": name, "mode": "infer", "batch_size": batch, "precision": precision,
                "device": "cpu", "train": None, "backend_options": {},
            }
        )  # fmt: skip
        why = backend.why_not(infer_cell)
        if why:
            return _Answer(name, precision, status="unsupported", reason=why)
        predictions = _predict(backend, infer_cell, state, calibration, test, batch, workdir, cache)
        if predictions is None:
            reason = f"{name} hands back no infer hook: its step runs only its own example"
            return _Answer(name, precision, status="unsupported", reason=reason)
        return _Answer(name, precision, predictions)
    except Unsupported as error:
        return _Answer(name, precision, status="unsupported", reason=one_line(str(error)))
    except Exception as error:  # noqa: BLE001 - a failed rung is a row, never a crash
        reason = one_line(f"{type(error).__name__}: {error}")
        return _Answer(name, precision, status="failed", reason=reason)


def _predict(
    backend: Backend,
    cell: Cell,
    state: dict[str, torch.Tensor] | None,
    calibration: Calibration,
    test: Split,
    batch: int,
    workdir: Path,
    cache: Any,
) -> np.ndarray | None:
    """The argmax of the first output over the test split, padded rows dropped."""
    from stackcost import zoo
    from stackcost.backends import PrepareContext
    from stackcost.quantize import is_quantized, quiet
    from stackcost.verify import to_numpy

    model = zoo.build_model(cell.model, cell.sizes)  # fresh: a rung may change it in place
    if state is not None:
        model.load_state_dict(state)
    ctx = PrepareContext(
        workdir=workdir / f"{cell.backend}-{cell.precision}",
        cache=cache,
        weights_digest=zoo.weights_digest(model),
        calibration=calibration if is_quantized(cell.precision) else None,
    )
    ctx.workdir.mkdir(parents=True, exist_ok=True)
    predictions = []
    # Every rung runs in this process: the compilers' deprecation and caching warnings, and
    # the ONNX exporter's constant-folding log (a worker's stderr in `stackcost run`), would
    # otherwise land among the table's lines.
    with quiet("onnxscript"):
        # The example a rung is built on is a training batch: the test split feeds infer.
        prepared = backend.prepare(model, calibration.examples[0], cell, ctx)
        if prepared.infer is None:
            return None
        for x, rows in heldout_batches(test, batch):
            logits = to_numpy(prepared.infer(x))
            predictions.append(logits.reshape(batch, -1).argmax(axis=1)[:rows])
    return np.concatenate(predictions)


def judge(answers: list[_Answer], labels: np.ndarray) -> list[Heldout]:
    """Each answer's accuracy, agreement and drop with their intervals, judged: a quantized
    precision by its QuantRule; fp32 on another rung by FP32_MIN_TOP1 and FP32_MAX_DROP_PT."""
    found = {(a.backend, a.precision): a.predictions for a in answers}
    reference = found.get(REFERENCE)
    n = len(labels)
    out = []
    for a in answers:
        if a.predictions is None:
            out.append(Heldout(a.backend, a.precision, a.status, a.reason))
            continue
        base = found.get((a.backend, "fp32"))
        if a.precision == "fp32" or base is None:  # fp32 itself, or its rung's failed
            base = reference
        right = a.predictions == labels
        acc = float(np.mean(right))
        top1 = top1_ci = drop = drop_ci = base_acc = None
        if reference is not None:
            agree = int(np.sum(a.predictions == reference))
            top1, top1_ci = agree / n, agreement_interval(agree, n)
        if base is not None:
            base_right = base == labels
            lost, gained = int(np.sum(base_right & ~right)), int(np.sum(~base_right & right))
            base_acc = float(np.mean(base_right))
            drop, drop_ci = (lost - gained) / n * 100, drop_interval(lost, gained, n)
        if (a.backend, a.precision) == REFERENCE:
            status, reason, rule = "ok", "", "the reference"
            # Compared with itself: 100% and 0 pt by construction, not estimates of a split.
            top1_ci, drop_ci = (1.0, 1.0), (0.0, 0.0)
        else:
            min_top1, max_drop = rule_bounds(a.precision)
            status, reason = verdict(n, top1, top1_ci, min_top1, drop, drop_ci, max_drop)
            rule = f"top-1 agreement >= {min_top1:.0%}, accuracy drop <= {max_drop:g} pt"
        top1_low, top1_high = top1_ci or (None, None)
        drop_low, drop_high = drop_ci or (None, None)
        out.append(
            Heldout(
                a.backend, a.precision, status, reason, samples=n, accuracy=acc,
                fp32_accuracy=base_acc, top1=top1, drop_pt=drop, rule=rule, top1_low=top1_low,
                top1_high=top1_high, drop_low_pt=drop_low, drop_high_pt=drop_high,
            )
        )  # fmt: skip
    return out


def rule_bounds(precision: str) -> tuple[float, float]:
    """(min top-1 agreement, max accuracy drop in points) a precision is held to."""
    if precision in QUANTIZED:
        return QUANTIZED[precision].min_top1, QUANTIZED[precision].max_accuracy_drop
    return FP32_MIN_TOP1, FP32_MAX_DROP_PT


def agreement_interval(agree: int, n: int) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval of agree / n at CONFIDENCE."""
    from scipy.stats import binomtest

    ci = binomtest(agree, n).proportion_ci(CONFIDENCE, method="exact")
    return float(ci.low), float(ci.high)


def drop_interval(lost: int, gained: int, n: int) -> tuple[float, float]:
    """The interval of the accuracy drop (lost - gained) / n, in points, at CONFIDENCE:
    Tango's score interval for a difference of paired proportions, the values of the
    drop its score test does not reject. `lost`: samples the reference got right and this
    answer wrong; `gained`: the reverse."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    z = float(norm.ppf(1 - (1 - CONFIDENCE) / 2))
    observed = (lost - gained) / n
    edge = 1e-12  # the score is undefined at a drop of exactly -1 or 1

    def score(delta: float) -> float:
        # The probability of a gained sample, fitted under the hypothesis drop = delta
        # (the root of a quadratic), then the standardized distance of what was seen.
        a, b, c = (
            2 * n,
            -lost - gained + (2 * n - lost + gained) * delta,
            -gained * delta * (1 - delta),
        )
        p_gained = (np.sqrt(max(b * b - 4 * a * c, 0.0)) - b) / (2 * a)
        variance = n * (2 * p_gained + delta * (1 - delta))
        return (lost - gained - n * delta) / np.sqrt(variance) if variance > 0 else 0.0

    # The score falls as delta rises and is 0 at the observed drop: one root each side.
    low = -1.0 if observed <= -1 + edge else brentq(lambda d: score(d) - z, -1 + edge, observed)
    high = 1.0 if observed >= 1 - edge else brentq(lambda d: score(d) + z, observed, 1 - edge)
    return float(low) * 100, float(high) * 100


def verdict(
    n: int,
    top1: float | None,
    top1_ci: tuple[float, float] | None,
    min_top1: float,
    drop: float | None,
    drop_ci: tuple[float, float] | None,
    max_drop: float,
) -> tuple[str, str]:
    """(status, reason): wrong when a rule's interval lies wholly outside it; undecided when
    the observed value misses the rule but its interval does not exclude it; ok when each
    observed value meets its rule, the reason naming any interval that still reaches past
    the bound (a finite split cannot show more); a rule without a value, its reference
    having failed, is not judged."""
    broken, missed, loose = [], [], []
    if top1 is not None and top1_ci is not None:
        low, high = top1_ci
        text = f"top-1 agreement {top1:.1%} [{low:.1%}, {high:.1%}]"
        if high < min_top1:
            broken.append(f"{text} < {min_top1:.0%}")
        elif top1 < min_top1:
            missed.append(f"{text} straddles {min_top1:.0%}")
        elif low < min_top1:
            loose.append(f"{text} reaches below {min_top1:.0%}")
    if drop is not None and drop_ci is not None:
        low, high = drop_ci
        text = f"accuracy drop {drop:.1f} pt [{low:.1f}, {high:.1f}]"
        if low > max_drop:
            broken.append(f"{text} > {max_drop:g} pt")
        elif drop > max_drop:
            missed.append(f"{text} straddles {max_drop:g} pt")
        elif high > max_drop:
            loose.append(f"{text} reaches above {max_drop:g} pt")
    if broken:
        return "wrong", "; ".join(broken + missed)
    if missed:
        return "undecided", f"undecided at n={n}: " + "; ".join(missed)
    if loose:
        return "ok", f"meets its rule as observed; at n={n} " + "; ".join(loose)
    return "ok", ""
