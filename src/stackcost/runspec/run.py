"""RunSpec: a validated description of what to run, and the checks that validate it.

Every check here produces a one-line message that names the bad value and what is
allowed; the CLI prints it and exits 2 before anything touches the store.
"""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from stackcost import zoo
from stackcost.allocators import DEFAULT_ALLOCATOR, allocator_problem
from stackcost.axes import CHOICE_AXES, GRID_AXES, GRID_COLUMNS
from stackcost.backends import REGISTRY, check_name
from stackcost.cell import GENERATE, HF_PREFIX, MODES, SCENARIOS, Cell, ModelRef, ServeConfig
from stackcost.clip import shown
from stackcost.errors import SpecError
from stackcost.measure.protocol import Protocol
from stackcost.runspec.grammar import (
    MAX_AXIS_VALUES,
    MAX_CELLS,
    MAX_REPEATS,
    SQLITE_INT_MAX,
    check_env_names,
    check_int,
    check_widths,
    parse_choices,
    parse_scenarios,
)
from stackcost.runspec.serving import check_lengths, check_serve_flags
from stackcost.scenarios.settings import KINDS, SERVE, TIMED_LOOP, LoadGenSettings
from stackcost.verify import DEFAULT_TOLERANCE
from stackcost.workload import SIZE_AXES, Workload
from stackcost.zoo.checkpoint import inspect as inspect_checkpoint
from stackcost.zoo.checkpoint import is_checkpoint_name
from stackcost.zoo.hf import size_problem as hf_size_problem


class RunSpec(BaseModel):
    # NaN or inf in any float (tolerance, a time) would pass every comparison it meets.
    model_config = ConfigDict(allow_inf_nan=False)

    models: list[ModelRef]
    backends: list[str] = Field(default_factory=lambda: list(REGISTRY))
    modes: list[str] = Field(default_factory=lambda: ["infer"])
    batch_sizes: list[int] = Field(default_factory=lambda: [1])
    # Values per size axis ("resolution", "seq_len", "samples"); an axis left out runs at
    # each model's default, and an axis applies only to the models that have it.
    sizes: dict[str, list[int]] = Field(default_factory=dict)
    precisions: list[str] = Field(default_factory=lambda: ["fp32"])
    threads: list[int] = Field(default_factory=lambda: [1])
    devices: list[str] = Field(default_factory=lambda: ["cpu"])
    repeats: int = Field(1, ge=1, le=MAX_REPEATS)
    # The stop rule over processes (issue 62): with cell_ci, a cell repeats until its
    # latency CI over repetitions is within +/-cell_ci, from max(repeats, RULE_START)
    # processes up to max_repeats (execute/plan.py). None: exactly `repeats`.
    cell_ci: float | None = Field(None, gt=0, lt=1)
    max_repeats: int = Field(12, ge=2, le=MAX_REPEATS)
    protocol: Protocol = Field(default_factory=Protocol)
    timeout_s: float = Field(600.0, gt=0)
    tolerance: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_TOLERANCE))
    backend_options: dict[str, dict[str, str]] = Field(default_factory=dict)
    # Instead of batch_sizes: double the batch from 1 per series until throughput stops
    # improving, memory or time runs out, or max_batch is reached.
    find_max_batch: bool = False
    max_batch: int = Field(1024, ge=1, le=SQLITE_INT_MAX)
    # Where the time goes (issue 6): after the timed loop, a profiled pass (breakdown),
    # FLOPs, and a side-channel sampler (utilization, energy) during the timed loop.
    profile: bool = False
    sample_interval_ms: float = Field(10.0, gt=0)
    # Variables passed to workers beyond the whitelist (execute/environ.py); recorded.
    inherit_env: list[str] = Field(default_factory=list)
    # The workers' memory allocator (stackcost.allocators); recorded in each thread_env.
    allocator: str = DEFAULT_ALLOCATOR
    # Workloads that live in code the parent does not import ("hf:" types, a user's
    # Workload): their facts, learned in a child by `validate`, keyed by model name.
    learned: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # What each cell runs: the timed loop ("timed-loop", the default) and/or MLPerf
    # LoadGen scenarios (stackcost.scenarios), with the LoadGen knobs they read.
    scenarios: list[str] = Field(default_factory=lambda: [TIMED_LOOP])
    loadgen: LoadGenSettings = Field(default_factory=LoadGenSettings)
    # --scenario serve's sweep (its SLOs are the token bounds above, LoadGen's defaults);
    # None where no serve flag was given (a flag given outside serve is refused, whatever
    # its value), which serves ServeConfig's defaults.
    serve: ServeConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _resolutions_are_sizes(cls, data: Any) -> Any:
        """`resolutions` (the spelling before size axes were general) is the resolution axis."""
        if isinstance(data, dict) and "resolutions" in data:
            data = dict(data)
            values = data.pop("resolutions")
            if values:
                data["sizes"] = {**data.get("sizes", {}), "resolution": values}
        return data

    @property
    def resolutions(self) -> list[int] | None:
        return self.sizes.get("resolution")

    def workload(self, model: ModelRef) -> Workload:
        """The model's workload as the parent knows it: the zoo's, or learned in a child."""
        if model.name in self.learned:
            return Workload.from_facts(self.learned[model.name])
        if model.is_factory and model.input_shape is not None:
            return zoo.factory_workload(model, builder="")
        if model.is_hf or model.is_factory:
            raise SpecError(f"model {model.name!r} was not checked: validate the spec first")
        return zoo.model_info(model.name)

    def digest(self) -> str:
        """Identity of the spec, for resume."""
        import hashlib

        # Scenario fields at their defaults are left out: a timed-loop spec keeps the digest
        # it had before scenarios existed, so its stored runs still resume.
        plain = self.scenarios == [TIMED_LOOP] and self.loadgen == LoadGenSettings()
        # Likewise the serve sweep's settings, for a spec that does not serve.
        exclude = {"scenarios", "loadgen", "serve"} if plain else set()
        if SERVE not in self.scenarios:
            exclude.add("serve")
        # And the allocator at its default: runs stored before it was a setting resume.
        if self.allocator == DEFAULT_ALLOCATOR:
            exclude.add("allocator")
        # And without the stop rule over processes, its settings.
        if self.cell_ci is None:
            exclude |= {"cell_ci", "max_repeats"}
        # A serve spec without serve flags digests as its defaults, as before they were optional.
        spec = self if self.serve is not None else self.model_copy(update={"serve": ServeConfig()})
        blob = spec.model_dump_json(exclude=exclude or None)
        return hashlib.sha1(blob.encode()).hexdigest()[:16]

    def cells(self) -> list[Cell]:
        out = []
        # --scenario generate with LoadGen's scenarios: they serve generated tokens.
        serving = GENERATE in self.scenarios and any(
            n not in (TIMED_LOOP, GENERATE, SERVE) for n in self.scenarios
        )
        for model in self.models:
            workload = self.workload(model)
            axes = workload.axes
            per_axis = [self.sizes.get(a) or [workload.sizes[a]] for a in axes]
            grid = [
                dict(zip(GRID_COLUMNS, point, strict=True))
                for point in itertools.product(
                    *(getattr(self, a.plural) for a in GRID_AXES.values())
                )
            ]
            for mode, batch, sizes, point, backend, name in itertools.product(
                self.modes,
                self.batch_sizes,
                [dict(zip(axes, combo, strict=True)) for combo in itertools.product(*per_axis)],
                grid,
                self.backends,
                self.scenarios,
            ):
                serve = None
                # Token generation is a mode of its own (its scenario follows from it).
                if name == SERVE:  # generation under a request-rate sweep
                    mode = GENERATE
                    serve = (self.serve or ServeConfig()).model_copy(
                        update={
                            "ttft_bound_ms": self.loadgen.value("ttft_bound_ms"),
                            "tpot_bound_ms": self.loadgen.value("tpot_bound_ms"),
                        }
                    )
                elif name == GENERATE:
                    if serving:
                        continue  # generate names what the LoadGen scenarios serve
                    mode = GENERATE
                elif serving and name != TIMED_LOOP:
                    mode = GENERATE
                generates = mode == GENERATE
                scenario = (
                    None
                    if name in (TIMED_LOOP, GENERATE, SERVE)
                    else self.loadgen.config(name, tokens=generates)
                )
                if generates and scenario is not None and KINDS[name].tokens is None:
                    continue  # refused by check_generate; views never see such a cell
                out.append(
                    Cell(
                        model=model,
                        backend=backend,
                        mode=mode,
                        batch_size=batch,
                        sizes=sizes,
                        **point,
                        backend_options=self.backend_options.get(backend, {}),
                        scenario=scenario,
                        serve=serve,
                    )
                )
        return list({c.key(): c for c in out}.values())  # --mode generate + --scenario generate


FACTORY_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


HF_NAME = re.compile(re.escape(HF_PREFIX) + r"[a-z][a-z0-9_-]*")
HEADS = ("base", "classification", "causal-lm")  # on top of a Hugging Face model (zoo/hf.py)


def _checkpoint_ref(folder: str, given: dict[str, Any], trust_pickle: bool) -> ModelRef:
    """A checkpoint folder as a model: its weights and config are the checkpoint's own, so
    no flag that would rebuild or reshape them applies; its files are inspected here."""
    for flag, value in given.items():
        if value:
            raise SpecError(
                f"{flag} does not apply to checkpoint {folder}: its weights and config are its own"
            )
    try:
        record = inspect_checkpoint(folder, trust_pickle)
    except zoo.ZooError as exc:
        raise SpecError(str(exc)) from None
    name = HF_PREFIX + str(Path(folder).resolve())
    return ModelRef(name=name, num_classes=0, checkpoint=record, trust_pickle=trust_pickle)


def model_ref(
    name: str,
    *,
    num_classes: int | None = None,
    in_channels: int | None = None,
    conv_bias: bool = False,
    init: str = "torch-default",
    input_shape: tuple[int, ...] | None = None,
    seed: int = 0,
    config: dict[str, Any] | None = None,
    head: str | None = None,
    trust_pickle: bool = False,
) -> ModelRef:
    """A ModelRef with the zoo's defaults filled in; raises SpecError on bad input."""
    _check_model_flags(name, init, seed, num_classes, in_channels, config, head)
    if name.startswith(HF_PREFIX) and is_checkpoint_name(name.removeprefix(HF_PREFIX)):
        given = {
            "-c/--config": config,
            "--head": head,
            "--input-shape": input_shape,
            "--in-channels": in_channels,
            "--num-classes": num_classes,
            "--init": init != "torch-default",
        }
        return _checkpoint_ref(name.removeprefix(HF_PREFIX), given, trust_pickle)
    if trust_pickle:
        raise SpecError(f"--trust-pickle applies to checkpoint folders (hf:./path), not {name!r}")
    if name.startswith(HF_PREFIX):
        _check_hf_type(name, input_shape, in_channels)
        # The type and the overrides are checked against transformers in a child (probe).
        return ModelRef(
            name=name, num_classes=num_classes or 0, init=init, seed=seed,
            config=dict(config or {}), head=head,
        )  # fmt: skip
    if ":" in name:
        _check_factory(name, in_channels)
        # Not imported here: user code runs in a probe and in workers only (execute/probe.py).
        return ModelRef(
            name=name,
            num_classes=num_classes or 0,
            in_channels=input_shape[0] if input_shape else 3,
            conv_bias=conv_bias,
            init=init,
            input_shape=input_shape,
            seed=seed,
        )
    _check_zoo_model(name, input_shape)
    info = zoo.model_info(name)
    return ModelRef(
        name=name,
        num_classes=num_classes or info.num_classes,
        in_channels=in_channels or info.in_channels,
        conv_bias=conv_bias,
        init=init,
        seed=seed,
        config=dict(config or {}),
        head=head,
    )


def _check_model_flags(
    name: str,
    init: str,
    seed: int,
    num_classes: int | None,
    in_channels: int | None,
    config: dict[str, Any] | None,
    head: str | None,
) -> None:
    """The checks every kind of model shares, before its kind decides the rest."""
    if init not in zoo.INIT_SCHEMES:
        raise SpecError(f"unknown init {init!r} (allowed: {', '.join(zoo.INIT_SCHEMES)})")
    check_int(seed, "seed")
    check_widths(num_classes, in_channels)
    if head is not None and head not in HEADS:
        raise SpecError(f"unknown head {head!r} (allowed: {', '.join(HEADS)})")
    hf = name.startswith(HF_PREFIX) or zoo.is_hf_entry(name)
    if (config or head) and not hf:
        flag = "-c/--config" if config else "--head"
        raise SpecError(f"{flag} applies to Hugging Face models (hf:TYPE, {zoo.hf_entries()})")
    for key, value in (config or {}).items():  # before the probe: no transformers needed
        if problem := hf_size_problem(key, value):
            raise SpecError(f"{name}: {problem}")


def _check_hf_type(name: str, input_shape: tuple[int, ...] | None, in_channels: int | None) -> None:
    """An hf:<model_type> name: well formed, and no input flag (its config sets the inputs)."""
    if not HF_NAME.fullmatch(name):
        raise SpecError(f"model {name!r} is not of the form hf:<model_type>, e.g. hf:bert")
    for what, given in (("--input-shape", input_shape), ("--in-channels", in_channels)):
        if given is not None:
            raise SpecError(f"{what} does not apply to {name}: its config sets the inputs")


def _check_factory(name: str, in_channels: int | None) -> None:
    """A package.module:factory name: well formed, its inputs set by --input-shape alone."""
    if in_channels is not None:
        raise SpecError(
            f"--in-channels {in_channels} does not apply to factory {name!r}: "
            "its --input-shape (or its Workload) sets the inputs"
        )
    if not FACTORY_PATH.fullmatch(name):
        raise SpecError(f"model factory {name!r} is not of the form 'package.module:factory'")


def _check_zoo_model(name: str, input_shape: tuple[int, ...] | None) -> None:
    """A zoo model: one the zoo has, whose inputs the zoo declares."""
    if name not in zoo.MODELS:
        allowed = ", ".join(zoo.MODELS)
        raise SpecError(
            f"unknown model {name!r} (allowed: {allowed}, hf:<model_type>, or package.module:ATTR)"
        )
    if input_shape is not None:
        raise SpecError(
            f"--input-shape does not apply to zoo model {name!r}: its inputs are declared "
            "by the zoo (see `stackcost list models`)"
        )


def _check_sizes(spec: RunSpec) -> None:
    """Integers a store can hold, axes and grids of a bounded size: before expansion."""
    for what, values in (
        ("batch size", spec.batch_sizes),
        ("threads", spec.threads),
        *((name.replace("_", " "), values) for name, values in spec.sizes.items()),
    ):
        if len(values) > MAX_AXIS_VALUES:
            raise SpecError(f"{what} list has {len(values):,} values (at most {MAX_AXIS_VALUES:,})")
        for v in values:
            check_int(v, what)
            if v <= 0:
                raise SpecError(f"{what} {v} must be a positive integer (>= 1)")
    for model in spec.models:
        check_int(model.seed, "seed")
        check_widths(model.num_classes, model.in_channels)
        for v in model.input_shape or ():
            check_int(v, "input shape dimension")
    axes = (
        spec.models,
        spec.backends,
        spec.modes,
        spec.batch_sizes,
        *(values for values in spec.sizes.values()),
        *(getattr(spec, a.plural) for a in GRID_AXES.values()),
        spec.scenarios,
    )
    cells = math.prod(len(axis) for axis in axes)
    if cells > MAX_CELLS:
        raise SpecError(f"the spec expands to {cells:,} cells (at most {MAX_CELLS:,})")


def check_threads(threads: list[int]) -> None:
    from stackcost.env import cores

    available = cores()
    for n in threads:
        if n > available:
            raise SpecError(
                f"threads {n} is more than the {available} CPUs this process may use "
                f"(allowed: 1..{available}): oversubscribed threads measure the scheduler"
            )


def validate(fields: dict | RunSpec) -> RunSpec:
    """Check types (pydantic), then names against registries and resolutions against models.
    Spawns nothing: user code (factories, custom backends) and Hugging Face configs are
    asked in a child once, where the run starts (execute.runner.prepare)."""
    from stackcost.backends import is_import_path, load_backend

    if isinstance(fields, RunSpec):
        fields = fields.model_dump()
    try:
        spec = RunSpec.model_validate(fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise SpecError(f"{loc} = {shown(err.get('input'))}: {err['msg']}") from None
    _check_sizes(spec)
    for backend in spec.backends:
        check_name(backend)
    for name in spec.backend_options:
        if name not in spec.backends:
            raise SpecError(f"options given for backend {name!r}, which is not being run")
    parse_choices(",".join(spec.modes), "mode", MODES)
    if "train" in spec.modes:  # a train cell needs data and an optimizer: a TrainSpec
        raise SpecError("mode 'train' is run by `stackcost train MODEL --dataset ...`")
    for axis in CHOICE_AXES:
        parse_choices(",".join(getattr(spec, axis.plural)), axis.name, axis.values or ())
    check_threads(spec.threads)
    defaults = RunSpec.model_fields
    if spec.sample_interval_ms != defaults["sample_interval_ms"].default and not spec.profile:
        raise SpecError("sample-interval applies only with profile (it is the sampler's rate)")
    if spec.max_batch != defaults["max_batch"].default and not spec.find_max_batch:
        raise SpecError("max-batch applies only with find-max-batch (it bounds the search)")
    check_repeat_rule(spec)
    check_scenarios(spec)
    problem = check_env_names(spec.inherit_env) or allocator_problem(spec.allocator)
    if problem:
        raise SpecError(problem)
    # Sizes of a model in user code or transformers are checked once it is learned (prepare).
    if not any(m.needs_probe for m in spec.models):
        check_sizes(spec.sizes, [spec.workload(m) for m in spec.models])
    for name in spec.backends:  # stackcost's own options; a custom backend's in prepare
        if not is_import_path(name):
            problem = load_backend(name).check_options(dict(spec.backend_options.get(name, {})))
            if problem:
                raise SpecError(problem)
    return spec


# The stop rule over processes starts from this many: a t-interval over 2 is 12.7 SDs wide.
RULE_START = 3


def check_repeat_rule(spec: RunSpec) -> None:
    """--cell-ci and --max-repeats: the rule's settings agree with each other and the run."""
    if spec.cell_ci is None:
        if spec.max_repeats != RunSpec.model_fields["max_repeats"].default:
            raise SpecError("max-repeats applies only with cell-ci (it bounds that rule)")
        return
    if spec.find_max_batch:
        raise SpecError("cell-ci does not combine with find-max-batch (a search, not a grid)")
    start = max(spec.repeats, RULE_START)
    if spec.max_repeats < start:
        raise SpecError(
            f"max-repeats {spec.max_repeats} is below the {start} processes cell-ci starts "
            f"from (max(repeats, {RULE_START})): allowed {start}..{MAX_REPEATS}"
        )


# LoadGen knobs and the scenarios that read them (from settings.KINDS): a knob given
# without one is a mistake. The token bounds are read by those scenarios serving generated
# tokens (mode generate), the latency bound by them serving anything else.
BOUNDED = tuple(n for n, k in KINDS.items() if k.reads_bound)
TOKEN_KNOBS = {
    "ttft_bound_ms": ("ttft-bound", BOUNDED),
    "tpot_bound_ms": ("tpot-bound", BOUNDED),
}
# --scenario serve reads the token bounds as its goodput SLOs.
BOUNDS = ("latency_bound_ms",)
LOADGEN_KNOBS = {
    "latency_bound_ms": ("latency-bound", BOUNDED),
    "samples_per_query": (
        "samples-per-query",
        tuple(n for n, k in KINDS.items() if k.reads_samples),
    ),
    "instances": ("instances", tuple(n for n, k in KINDS.items() if k.reads_instances)),
    "min_duration_ms": ("loadgen-min-duration", SCENARIOS),
    "min_query_count": ("loadgen-min-queries", SCENARIOS),
}


def check_scenarios(spec: RunSpec) -> None:
    """Scenario names, knobs that some chosen scenario reads, LoadGen installed, and no
    mode that has no meaning under LoadGen (a batch search, a profiled pass)."""
    import importlib.util

    parse_scenarios(",".join(spec.scenarios))
    check_serve_flags(spec.serve, spec.scenarios)
    check_generate(spec)
    loadgen = [n for n in spec.scenarios if n not in (TIMED_LOOP, GENERATE, SERVE)]
    # The query's latency bound is read by LoadGen cells that serve anything but generated
    # tokens; the token bounds by those that serve them (mode generate); the rest by both.
    serving = GENERATE in spec.scenarios or GENERATE in spec.modes
    plain = GENERATE not in spec.scenarios and any(m != GENERATE for m in spec.modes)
    for key, (flag, readers) in {**LOADGEN_KNOBS, **TOKEN_KNOBS}.items():
        tokens, bound = key in TOKEN_KNOBS, key in BOUNDS
        present = [] if (tokens and not serving) or (bound and not plain) else loadgen
        if tokens and SERVE in spec.scenarios:
            continue  # serve's goodput SLOs
        if getattr(spec.loadgen, key) is not None and not set(readers) & set(present):
            prefix = "generate," if tokens else ""
            # A generate cell's bounds are on its tokens, not on the query.
            hint = " (generate,server: --ttft-bound, --tpot-bound)" if bound and serving else ""
            raise SpecError(
                f"{flag} applies only with --scenario "
                + " or ".join(prefix + r for r in readers)
                + (" or serve" if tokens else "")
                + hint
            )
    if not loadgen:
        return
    for flag, on in (("find-max-batch", spec.find_max_batch), ("profile", spec.profile)):
        if on:
            raise SpecError(
                f"--{flag} measures the timed loop; it does not apply with --scenario "
                f"{','.join(loadgen)} (run them separately)"
            )
    if importlib.util.find_spec("mlperf_loadgen") is None:
        raise SpecError(
            f"--scenario {','.join(loadgen)} needs MLPerf LoadGen, which is not installed: "
            "pip install 'stackcost[loadgen]' (mlcommons-loadgen)"
        )


def check_generate(spec: RunSpec) -> None:
    """--scenario generate (or --mode generate) runs alone or served under LoadGen's Server
    or Offline (token latencies), on dense decoders with their LM head. A model the probe
    learns (hf:, user code) is checked once learned: prepare calls this again."""
    from stackcost.scenarios.generate import moe_reason

    generates = GENERATE in spec.scenarios or GENERATE in spec.modes or SERVE in spec.scenarios
    if not generates:
        if "new_tokens" in spec.sizes:  # a forward pass of a decoder reads its prompt only
            raise SpecError(
                "new-tokens applies only with --scenario generate or serve (the timed loop "
                "runs a decoder's forward pass over --prompt-len tokens)"
            )
        return
    others = [n for n in spec.scenarios if n not in (TIMED_LOOP, GENERATE, SERVE)]
    if refused := [n for n in others if KINDS[n].tokens is None]:
        serving = " or ".join(f"generate,{n}" for n, k in KINDS.items() if k.tokens is not None)
        raise SpecError(
            f"--scenario generate runs on its own or served under LoadGen ({serving}); "
            f"run --scenario {','.join(refused)} separately"
        )
    for flag, on in (("find-max-batch", spec.find_max_batch), ("profile", spec.profile)):
        if on:
            raise SpecError(f"--{flag} measures the timed loop; it does not apply to generate")
    for model in spec.models:
        if model.needs_probe and model.name not in spec.learned:
            continue  # not known until the probe has built its config (execute.runner.prepare)
        workload = spec.workload(model)
        if workload.domain != "generation":
            raise SpecError(
                f"--scenario generate needs a decoder with its LM head, and {model.name} is not "
                f"one (decoders: {', '.join(zoo.decoder_entries())}, or hf:TYPE --head causal-lm)"
            )
        if (moe := moe_reason(workload)) is not None:
            raise SpecError(f"--scenario generate: {moe}")
        check_lengths(workload, spec.sizes, spec.scenarios, spec.modes, spec.serve)


def check_sizes(sizes: dict[str, list[int]], workloads: list[Workload]) -> None:
    """Each size axis given is one stackcost knows, applies to some model, and every value
    fits every model that has the axis."""
    for axis, values in sizes.items():
        if axis not in SIZE_AXES:
            raise SpecError(f"unknown size axis {axis!r} (allowed: {', '.join(SIZE_AXES)})")
        having = [w for w in workloads if axis in w.sizes]
        if not having:
            w = workloads[0]
            raise SpecError(w.size_problem(axis, values[0]) or f"{axis} applies to no model")
        for w in having:
            for v in values:
                problem = w.size_problem(axis, v)
                if problem:
                    raise SpecError(problem)


def db_problem(path: str | Path) -> str | None:
    from stackcost.store.database import check_writable

    return check_writable(Path(path))
