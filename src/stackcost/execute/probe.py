"""What the parent must know about user code, learned in a throwaway process.

A model factory or a custom backend ("module:Name") is the user's code: its import may
print, call sys.exit or crash. The parent (which holds the store and the run) never
imports it. A run asks one child instead, once, where it starts (execute.runner.prepare,
or `stackcost train` as it builds its spec, handing the answers to prepare; validation
spawns nothing, so views never probe): does the model resolve to a Workload
(its inputs and size axes) or a factory (it is not called: calling it is the worker's
job, and its failure a cell's result; "hf:" types are checked against transformers here
too), is the backend a Backend subclass, what does it say of itself (available,
capabilities, options)? A broken answer is bad input, refused before anything is written.

Usage (by probe() only): python -m stackcost.execute.probe REQUEST.json ANSWER.json
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stackcost.backends.base import BackendFacts, Capabilities
from stackcost.errors import SpecError

if TYPE_CHECKING:
    from stackcost.backends.base import Backend
    from stackcost.cell import ModelRef

# Importing a user's module may import torch and transformers (seconds on a slow machine);
# anything longer is most likely a hang. Commands raise it with --import-timeout.
TIMEOUT_S = 30.0


class ProbeError(SpecError):
    """User code that cannot be used: bad input, one line naming it."""


def probe(
    models: list[ModelRef],
    backends: Mapping[str, Mapping[str, str]],
    environ: Mapping[str, str] | None = None,
    timeout_s: float = TIMEOUT_S,
    python: str = sys.executable,
) -> tuple[dict[str, BackendFacts], dict[str, dict[str, Any]]]:
    """Learn user models' workloads (and check they import) and custom backends' facts in
    one child of `python` (an A/B side's interpreter: the code its workers import);
    ProbeError on a model or backend that cannot be used."""
    if not models and not backends:
        return {}, {}
    request = {
        "models": [m.model_dump(mode="json") for m in models],
        "backends": {k: dict(v) for k, v in backends.items()},
    }
    with tempfile.TemporaryDirectory(prefix="stackcost-probe-") as tmp:
        req, ans = Path(tmp) / "request.json", Path(tmp) / "answer.json"
        req.write_text(json.dumps(request))
        names = ", ".join([*(m.name for m in models), *backends])
        try:
            out = subprocess.run(
                [python, "-m", __name__, str(req), str(ans)],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env=dict(environ) if environ is not None else None,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise ProbeError(
                f"importing {names} did not finish in {timeout_s:g} s "
                "(if it is only slow, raise the limit with --import-timeout SECONDS)"
            ) from None
        if not ans.exists():
            how = (
                f"died on signal {-out.returncode}"
                if out.returncode < 0
                else f"exited with code {out.returncode}"
            )
            raise ProbeError(f"importing {names} {how} before it could be checked")
        answer = json.loads(ans.read_text())
    if answer.get("error"):
        raise ProbeError(answer["error"])
    facts = {
        name: BackendFacts(
            ok=f["ok"],
            reason=f["reason"],
            modes=frozenset(f["modes"]),
            devices=frozenset(f["devices"]),
            precisions=frozenset(f["precisions"]),
            options_problem=f["options_problem"],
            precision_reasons=tuple(tuple(r) for r in f.get("precision_reasons", ())),
            generate=_generate_caps(f.get("generate")),
        )
        for name, f in answer["backends"].items()
    }
    return facts, answer["workloads"]


@dataclass(frozen=True)
class Answers:
    """What one probe learned: every backend's facts, and the workload facts of the models
    that live in code the parent does not import (by model name)."""

    facts: dict[str, BackendFacts]
    workloads: dict[str, dict[str, Any]]


def ask(
    models: list[ModelRef],
    backends: Mapping[str, Mapping[str, str]],
    environ: Mapping[str, str] | None = None,
    timeout_s: float = TIMEOUT_S,
    python: str = sys.executable,
) -> Answers:
    """Facts of every backend named (with the options given to it) and workloads of the
    models that need a child: stackcost's own backends are asked here, user code and
    transformers in one child at most (probe). ProbeError on unusable user code."""
    from stackcost.backends import is_import_path, load_backend

    custom = {name: opts for name, opts in backends.items() if is_import_path(name)}
    needs = [m for m in models if m.needs_probe]
    facts, workloads = probe(needs, custom, environ, timeout_s, python)
    for name, options in backends.items():
        if name not in custom:
            backend = load_backend(name)
            f = _facts_of(backend, options)
            generate = _generate_caps(f["generate"])
            facts[name] = BackendFacts(**{**f, "generate": generate, "check": backend.why_not})
    return Answers(facts, workloads)


def learn(
    backends: Mapping[str, Mapping[str, str]],
    environ: Mapping[str, str] | None = None,
) -> dict[str, BackendFacts]:
    """Facts of every backend named: `ask` without models."""
    return ask([], backends, environ).facts


def _generate_caps(data: Mapping[str, Any] | None) -> Capabilities | None:
    """A generator's capabilities from their JSON form (_facts_of's)."""
    if data is None:
        return None
    return Capabilities(
        frozenset({"generate"}), frozenset(data["devices"]), frozenset(data["precisions"])
    )


def _facts_of(backend: Backend, options: Mapping[str, str]) -> dict:
    availability, caps = backend.available(), backend.capabilities
    generate = backend.generate_capabilities()
    return {
        "generate": None
        if generate is None
        else {"devices": sorted(generate.devices), "precisions": sorted(generate.precisions)},
        "ok": availability.ok,
        "reason": availability.reason,
        "modes": frozenset(caps.modes),
        "devices": frozenset(caps.devices),
        "precisions": frozenset(caps.precisions),
        "options_problem": backend.check_options(dict(options)),
        "precision_reasons": caps.precision_reasons,
    }


def _answer(request: dict) -> dict:
    """In the child: the facts, or the first problem as one line."""
    from stackcost import zoo
    from stackcost.backends import load_backend
    from stackcost.cell import ModelRef

    workloads = {}
    for data in request["models"]:
        ref = ModelRef.model_validate(data)
        try:
            workload = zoo.workload_of(ref)
            if not workload.inputs:
                raise zoo.ZooError(
                    f"model factory {ref.name!r} returns a module: give its input shape, "
                    "e.g. --input-shape 3,224,224, or point at a stackcost Workload that "
                    "declares its inputs"
                )
            workloads[ref.name] = workload.facts()
        except zoo.ZooError as exc:
            return {"error": str(exc)}
        except Exception as exc:  # whatever the user's module (or transformers) raises
            return {"error": f"model {ref.name!r}: {type(exc).__name__}: {exc}".splitlines()[0]}
    facts = {}
    for name, options in request["backends"].items():
        try:
            backend = load_backend(name)
        except (ImportError, AttributeError, TypeError, ValueError) as exc:
            return {"error": f"backend {name!r} cannot be loaded: {exc}".splitlines()[0]}
        except Exception as exc:  # whatever the user's module raises at import
            return {"error": f"backend {name!r}: importing it raised {type(exc).__name__}: {exc}"}
        f = _facts_of(backend, options)
        facts[name] = {k: sorted(v) if isinstance(v, frozenset) else v for k, v in f.items()}
    return {"backends": facts, "workloads": workloads}


def main(argv: list[str]) -> int:
    request_path, answer_path = argv[:2]
    try:
        answer = _answer(json.loads(Path(request_path).read_text()))
    except SystemExit as exc:
        answer = {"error": f"importing user code called sys.exit({exc.code!r})"}
    Path(answer_path).write_text(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
