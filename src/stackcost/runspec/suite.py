"""A named benchmark suite (TorchBench-style) and its summary: speedup and memory vs eager.

A suite is a short YAML file (examples/suite.yaml is `default`): a list of models, each
with its own batch, size and config, run through the same backends, threads, repeats and
protocol. It expands into one RunSpec per model, each executed by the ordinary engine
(execute/runner.py) with resume: a run is keyed by its spec's digest and the
environment's fingerprint, so running the suite again continues each model where it
stopped and re-measures nothing stored. One spec per model, not one for the suite:
a RunSpec's axes are a product over all its models (every model would get every batch
and size given), and a per-model digest means that adding or editing one model in the
suite leaves the other models' stored runs in place. Precision is an axis of each entry's
cells (`precisions:` in the file, or --precisions): one run per model still, its fp32
and quantized cells side by side. A quantized precision brings fp32 with it, as the
backends bring eager: fp32 is what its speedup is taken against, on the same rung.

The summary (SuiteSummary) is computed from stored RunResults alone, so it can be
re-rendered from the store without measuring: per workload, eager median / backend
median (speedup), peak RSS over baseline backend / eager (CPU memory) and allocator
peak backend / eager (device memory, CUDA only); per backend, the geometric mean over
workloads, saying over how many it is taken. Only cells whose every repetition is `ok`
(trusted) and verified against the eager reference, over an eager cell that is too,
enter the means; every other (workload, backend) pair is listed with its status and reason.
An `unstable` cell (or one over an unstable eager) is verified and was timed on a quiet
machine, only its spread is wider than the protocol asked: its ratio is kept as
indicative, shown marked "?" and averaged in a second, indicative mean, never in the first.
On a 2-core machine most large models end unstable, and a mean over 1 of 6 models says
little; the indicative mean says what the measured medians say, and is labelled so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stackcost.axes import DEVICES, PRECISIONS, QUANTIZED
from stackcost.backends import BASELINE, check_name
from stackcost.cell import Device, ModelRef
from stackcost.clip import middle, one_line, shown
from stackcost.errors import SpecError
from stackcost.measure.protocol import Protocol

if TYPE_CHECKING:
    from stackcost.runspec.run import RunSpec

DEFAULT_NAME = "default"
# Where `stackcost suite NAME` looks: ./examples first, then the checkout's examples/.
EXAMPLES = (Path("examples"), Path(__file__).resolve().parents[3] / "examples")
DEFAULT_BACKENDS = [BASELINE, "torchscript", "inductor", "export-aot", "onnxruntime", "openvino"]
# A suite is a scoreboard, not a study: one short repetition per cell unless it says more,
# and a median known to +/-5% (the speedups it ranks differ by 20% and more; a 2-core
# machine rarely reaches a study's +/-2% on a 300 ms model within seconds).
SUITE_PROTOCOL = {
    "min_time_s": 1.0,
    "min_iters": 10,
    "target_ci": 0.05,
    "max_time_s": 10.0,
    "warmup_max_time_s": 5.0,
}


# -- the suite file --------------------------------------------------------------------


class SuiteModel(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    name: str
    batch: int = Field(1, ge=1)
    # One value for the model's only size axis (224, 128, 16000), or {axis: value}.
    size: int | dict[str, int] | None = None
    config: dict[str, int | float | bool | str] = Field(default_factory=dict)  # Hugging Face
    head: str | None = None
    init: str = "torch-default"
    seed: int = 0


class SuiteFile(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    name: str | None = None  # default: from the file name (suite.yaml: default)
    description: str = ""
    models: list[SuiteModel] = Field(min_length=1)
    backends: list[str] = Field(default_factory=lambda: list(DEFAULT_BACKENDS), min_length=1)
    threads: int | None = Field(None, ge=1)  # default: every CPU this process may use
    device: Device = "cpu"
    # The cells' precisions (the grid's precision axis); `precision: X` is the older
    # one-value form, kept so suite files written before still read.
    precisions: list[str] | None = Field(None, min_length=1)
    precision: str | None = None
    repeats: int = Field(1, ge=1)
    timeout_s: float = Field(600.0, gt=0)
    protocol: dict[str, Any] = Field(default_factory=dict)  # over SUITE_PROTOCOL
    tolerance: dict[str, float] = Field(default_factory=dict)
    backend_options: dict[str, dict[str, str]] = Field(default_factory=dict)
    inherit_env: list[str] = Field(default_factory=list)


@dataclass
class Suite:
    name: str
    source: str  # the file, as messages show it
    description: str
    backends: list[str]
    precisions: list[str]  # in the axis' order, fp32 first where a quantized one is asked
    # None: the file leaves it out and the suite was read for viewing (each run used every
    # CPU of the machine that ran it; load_suite(for_viewing=True) asks nothing of this one).
    threads: int | None
    specs: list[RunSpec]  # one per model, in the file's order

    def labels(self) -> list[str]:
        """Each entry's label as the file gives it: a workload in user code or transformers
        is labelled by the sizes given (its defaults are learned where it runs: label a
        prepared spec, or a stored run's, to have them)."""
        return [workload_label_of_spec(s) for s in self.specs]

    def expected(self) -> list[Expected]:
        """Every row the summary should have: each entry at each precision."""
        return [Expected(label, p) for label in self.labels() for p in self.precisions]


class Expected(NamedTuple):
    """One row a suite's summary should have, measured or not: a workload at a precision."""

    workload: str  # workload_label's: 'resnet50 b1 224 px'
    precision: str = "fp32"

    @property
    def label(self) -> str:
        return precision_label(self.workload, self.precision)


def suite_path(name_or_file: str) -> Path:
    """A YAML path as given, or a suite name: 'default' is examples/suite.yaml, NAME is
    examples/suite-NAME.yaml."""
    given = Path(name_or_file)
    if given.suffix in (".yaml", ".yml") or given.exists() or "/" in name_or_file:
        return given
    file = "suite.yaml" if name_or_file == DEFAULT_NAME else f"suite-{name_or_file}.yaml"
    for folder in EXAMPLES:
        if (folder / file).is_file():
            return folder / file
    known = sorted(known_suites())
    raise SpecError(
        f"no suite named {shown(name_or_file, 40)} (known: {', '.join(known) or 'none'}; "
        "or give a YAML file)"
    )


def known_suites() -> set[str]:
    names = set()
    for folder in EXAMPLES:
        if (folder / "suite.yaml").is_file():
            names.add(DEFAULT_NAME)
        names.update(p.stem[len("suite-") :] for p in folder.glob("suite-*.yaml"))
    return names


def _suite_name(path: Path) -> str:
    stem = path.stem
    if stem == "suite":
        return DEFAULT_NAME
    return stem[len("suite-") :] if stem.startswith("suite-") else stem


def load_suite(
    name_or_file: str,
    backends: Sequence[str] | None = None,
    precisions: Sequence[str] | None = None,
    *,
    device: str | None = None,
    for_viewing: bool = False,
) -> Suite:
    """Read, check and expand a suite; SpecError (one line, with file:line) on bad input.

    `backends` replaces the file's; eager is always run (it is the summary's baseline).
    `precisions` replaces the file's; fp32 is run beside any quantized one (its baseline).
    `device` replaces the file's (`device:`, default cpu).
    Nothing is written and nothing spawned: user code is asked where each entry runs
    (execute.runner.prepare). `for_viewing`: the suite is read to find its stored runs
    (report --suite, suite --summary-only), which may come from any machine, so nothing
    of this one applies: its thread count is neither checked against this machine's CPUs
    nor, when the file leaves it out, taken from them.
    """
    try:
        return _load_suite(name_or_file, backends, precisions, device, for_viewing)
    except SpecError as exc:
        raise SpecError(one_line(str(exc))) from None


def _load_suite(
    name_or_file: str,
    backends: Sequence[str] | None,
    precisions: Sequence[str] | None,
    device: str | None,
    for_viewing: bool,
) -> Suite:
    from stackcost.runspec.reader import load_mapping

    path = suite_path(name_or_file)
    source = middle(str(path))
    data, lines = load_mapping(path, source, "a suite")
    if isinstance(data.get("models"), list):  # `- resnet50` is short for `- {name: resnet50}`
        data["models"] = [{"name": m} if isinstance(m, str) else m for m in data["models"]]
    try:
        suite = SuiteFile.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_message(source, lines, exc)) from None
    if device is not None:
        if device not in DEVICES:
            raise SpecError(f"--device {device!r} is not a device (allowed: {', '.join(DEVICES)})")
        suite = suite.model_copy(update={"device": device})
    return _expand(suite, path, source, lines, backends, precisions, for_viewing)


def _at(source: str, lines: dict[tuple, int], *key: Any) -> str:
    while key and key not in lines:
        key = key[:-1]
    line = lines.get(key)
    return f"{source}:{line}" if line else source


def _message(source: str, lines: dict[tuple, int], exc: ValidationError) -> str:
    err = exc.errors()[0]
    # pydantic's union members ("int", "dict[str,int]") are not keys of the file.
    loc = tuple(p for p in err["loc"] if isinstance(p, int) or p in _KEYS)
    key = ".".join(str(p) for p in loc)
    where = _at(source, lines, *loc)
    if err["type"] == "extra_forbidden":
        parent = SuiteModel if loc[:1] == ("models",) else SuiteFile
        unknown = err["loc"][-1]
        where = _at(source, lines, *loc, unknown)
        allowed = ", ".join(parent.model_fields)
        return f"{where}: unknown key {shown(unknown, 40)} (allowed: {allowed})"
    if err["type"] == "missing":
        return f"{where}: missing required key {key!r}"
    if err["type"] == "too_short":
        return f"{where}: {key} must not be empty"
    return f"{where}: {key} = {shown(err.get('input'))}: {one_line(err['msg'], 80)}"


_KEYS = set(SuiteFile.model_fields) | set(SuiteModel.model_fields)


def _expand(
    suite: SuiteFile,
    path: Path,
    source: str,
    lines: dict[tuple, int],
    override: Sequence[str] | None,
    precisions_given: Sequence[str] | None,
    for_viewing: bool,
) -> Suite:
    """The suite file as one validated RunSpec per model entry, in the file's order."""
    from stackcost.runspec.run import validate

    backends = _backends(suite, source, lines, override)
    precisions = _precisions(suite, source, lines, precisions_given)
    protocol = _protocol(suite, source, lines)
    threads, checked_threads = _threads(suite, source, lines, for_viewing)
    seen: set[tuple] = set()
    specs = []
    for i, entry in enumerate(suite.models):
        where = _at(source, lines, "models", i)
        ref = _entry_model(entry, i, where)
        fields = {
            "models": [ref],
            "backends": backends,
            "batch_sizes": [entry.batch],
            "sizes": _entry_sizes(entry, ref, i, source, lines),
            "precisions": precisions,
            "threads": [checked_threads],
            "devices": [suite.device],
            "repeats": suite.repeats,
            "timeout_s": suite.timeout_s,
            "protocol": protocol,
            "backend_options": {k: v for k, v in suite.backend_options.items() if k in backends},
            "inherit_env": suite.inherit_env,
            **({"tolerance": suite.tolerance} if suite.tolerance else {}),
        }
        try:
            spec = validate(fields)
        except SpecError as exc:
            raise SpecError(f"{where}: models[{i}] ({entry.name}): {exc}") from None
        if threads is not None and threads != checked_threads:
            spec = spec.model_copy(update={"threads": [threads]})
        key = (ref.model_dump_json(), entry.batch, workload_label_of_spec(spec))
        if key in seen:
            raise SpecError(f"{where}: models[{i}]: {entry.name} is in the suite twice as it is")
        seen.add(key)
        specs.append(spec)
    unused = [k for k in suite.backend_options if k not in backends]
    if unused:
        raise SpecError(
            f"{_at(source, lines, 'backend_options')}: backend_options given for "
            f"{', '.join(unused)}, which the suite does not run"
        )
    return Suite(
        name=suite.name or _suite_name(path),
        source=source,
        description=suite.description,
        backends=backends,
        precisions=precisions,
        threads=threads,
        specs=specs,
    )


def _backends(
    suite: SuiteFile, source: str, lines: dict[tuple, int], override: Sequence[str] | None
) -> list[str]:
    """The backends every entry is run through: --backends, else the file's; each known,
    none twice, and eager among them."""
    backends = list(override) if override else suite.backends
    for i, name in enumerate(backends):
        try:
            check_name(name)
        except SpecError as exc:
            where = "--backends" if override else f"{_at(source, lines, 'backends', i)}: backends"
            raise SpecError(f"{where}: {exc}") from None
    if len(set(backends)) != len(backends):
        raise SpecError(f"{source}: backends: {', '.join(backends)} names one twice")
    if BASELINE not in backends:  # the summary's ratios are to eager: it is always run
        backends = [BASELINE, *backends]
    return backends


def _protocol(suite: SuiteFile, source: str, lines: dict[tuple, int]) -> Protocol:
    """The suite's protocol over SUITE_PROTOCOL; an error names its line in the file."""
    try:
        return Protocol.model_validate({**SUITE_PROTOCOL, **suite.protocol})
    except ValidationError as exc:
        err = exc.errors()[0]
        what = ".".join(str(p) for p in err["loc"])
        where = _at(source, lines, "protocol", *err["loc"])
        if err["type"] == "extra_forbidden":
            raise SpecError(
                f"{where}: unknown key protocol.{shown(what, 40)[1:-1]} "
                f"(allowed: {', '.join(Protocol.model_fields)})"
            ) from None
        raise SpecError(
            f"{where}: protocol.{what} = {shown(err.get('input'))}: {one_line(err['msg'], 80)}"
        ) from None


def _threads(
    suite: SuiteFile, source: str, lines: dict[tuple, int], for_viewing: bool
) -> tuple[int | None, int | None]:
    """(the thread count the specs record, the one validate checks them at)."""
    from stackcost.env import cores
    from stackcost.runspec.grammar import check_int

    threads = suite.threads if for_viewing else suite.threads or cores()
    # validate's one check of this machine is the thread count against its CPUs: a view
    # validates at 1 thread and keeps the file's count (views match runs without it),
    # bounded as validate would.
    checked_threads = 1 if for_viewing else threads
    if threads is not None and threads != checked_threads:
        try:
            check_int(threads, "threads")
        except SpecError as exc:
            raise SpecError(f"{_at(source, lines, 'threads')}: {exc}") from None
    return threads, checked_threads


def _entry_model(entry: SuiteModel, i: int, where: str) -> ModelRef:
    """The entry's model, with the zoo's defaults; an error names the entry."""
    from stackcost.runspec.run import model_ref

    try:
        return model_ref(
            entry.name,
            init=entry.init,
            seed=entry.seed,
            config=dict(entry.config),
            head=entry.head,
        )
    except SpecError as exc:
        raise SpecError(f"{where}: models[{i}]: {exc}") from None


def _entry_sizes(
    entry: SuiteModel, ref: ModelRef, i: int, source: str, lines: dict[tuple, int]
) -> dict[str, list[int]]:
    """The entry's size as size axes: a bare number is the size of a zoo model's one axis."""
    from stackcost import zoo
    from stackcost.workload import SIZE_AXES

    if isinstance(entry.size, int):
        axes = zoo.MODELS[ref.name].axes if ref.name in zoo.MODELS else None
        if axes is None or len(axes) != 1:
            why = (
                "has no size axis (leave size out)"
                if axes == ()
                else f"has not one known size axis: give size as {{axis: value}} "
                f"(axes: {', '.join(SIZE_AXES)})"
            )
            where_size = _at(source, lines, "models", i, "size")
            raise SpecError(f"{where_size}: models[{i}].size: {ref.name} {why}")
        return {axes[0]: [entry.size]}
    if entry.size:
        return {axis: [value] for axis, value in entry.size.items()}
    return {}


def _precisions(
    suite: SuiteFile, source: str, lines: dict[tuple, int], given: Sequence[str] | None
) -> list[str]:
    """The precisions every entry is run at: --precisions, else the file's, else fp32;
    each one known, none twice, in the axis' order (the same set is the same spec, so a
    rerun resumes however it was spelled); fp32 added beside a quantized one."""
    if given is not None:
        values, key, where = list(given), "", "--precisions"
    elif suite.precisions is not None:
        if suite.precision is not None:
            raise SpecError(
                f"{_at(source, lines, 'precision')}: give precisions or precision, not both"
            )
        values, key, where = suite.precisions, "precisions", ""
    elif suite.precision is not None:
        values, key, where = [suite.precision], "precision", ""
    else:
        return ["fp32"]
    for i, value in enumerate(values):
        if value not in PRECISIONS:
            at = where or f"{_at(source, lines, key, i)}: {key}"
            raise SpecError(
                f"{at}: unknown precision {shown(value, 40)} (allowed: {', '.join(PRECISIONS)})"
            )
    if len(set(values)) != len(values):
        at = where or f"{_at(source, lines, key)}: {key}"
        raise SpecError(f"{at}: {', '.join(values)} names one twice")
    if any(p in QUANTIZED for p in values) and "fp32" not in values:
        values = ["fp32", *values]
    return sorted(values, key=PRECISIONS.index)


def workload_label_of_spec(spec: RunSpec) -> str:
    """'resnet50 b1 224 px': what one suite entry measures (its cells share it).

    A workload in user code or transformers ("hf:bert", a factory) is learned where the
    entry runs (execute.runner.prepare): until then it is labelled by the sizes the file
    gives, so a suite loads without a probe."""
    from stackcost.workload import show_sizes

    model = spec.models[0]
    if model.name not in spec.learned and (
        model.is_hf or (model.is_factory and model.input_shape is None)
    ):  # RunSpec.workload would refuse it: "was not checked"
        given = show_sizes({axis: values[0] for axis, values in spec.sizes.items()})
        return workload_label(model.name, spec.batch_sizes[0], given, model.config)
    cell = spec.cells()[0]
    return workload_label(cell.model.name, cell.batch_size, cell.size_label(), cell.model.config)


def precision_label(workload: str, precision: str) -> str:
    """A summary row's label: the workload's, and its precision where it is not fp32."""
    return workload if precision == "fp32" else f"{workload} {precision}"


def workload_label(name: str, batch: int, sizes: str, config: dict | None = None) -> str:
    parts = [name, f"b{batch}"]
    if sizes:
        parts.append(sizes)
    if config:
        parts.append(" ".join(f"{k}={v}" for k, v in config.items()))
    return " ".join(parts)
