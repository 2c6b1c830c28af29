"""The checks of `--scenario serve` and of generation's lengths, made where the flags enter
(RunSpec's validation, and prepare once a probed model is learned), so that bad input is
one line and exit 2 rather than a failed cell seconds into a worker.

- every serve flag given outside `--scenario serve`, whatever its value;
- the sweep's plan against its budget (serving/sweep.py: plan_problem);
- the lengths form read in full, a trace file included (serving/lengths.py);
- the longest request, prompt and output together, against the model's positions, for
  generate's fixed axes and serve's distributions and traces alike.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from stackcost.cell import GENERATE
from stackcost.errors import SpecError
from stackcost.scenarios.settings import SERVE
from stackcost.serving.lengths import Longest, longest
from stackcost.serving.sweep import plan_problem

if TYPE_CHECKING:
    from stackcost.cell import ServeConfig
    from stackcost.workload import Workload

SERVE_FLAGS = "serve-rates, serve-time, serve-budget, arrivals and lengths"


def check_serve_flags(config: ServeConfig | None, scenarios: list[str]) -> None:
    """The sweep's flags (None: none given): only with --scenario serve, and a plan that
    fits its budget."""
    if config is None:
        return
    if SERVE not in scenarios:
        raise SpecError(f"{SERVE_FLAGS} apply only with --scenario serve")
    if problem := plan_problem(config.rates, config.per_rate_s, config.budget_s):
        raise SpecError(problem)


def check_lengths(
    workload: Workload,
    sizes: dict[str, list[int]],
    scenarios: list[str],
    modes: list[str],
    config: ServeConfig | None,
) -> None:
    """Every request a generate or serve cell of `workload` may send, at the grid's `sizes`,
    fits the model's positions."""
    if "prompt_len" not in workload.sizes:
        return
    positions = workload.maximum.get("prompt_len")
    prompts = sizes.get("prompt_len") or [workload.sizes["prompt_len"]]
    outputs = sizes.get("new_tokens") or [workload.sizes["new_tokens"]]
    forms = {config.lengths if config is not None else "fixed"} if SERVE in scenarios else set()
    if GENERATE in scenarios or GENERATE in modes:
        forms.add("fixed")  # generate (and LoadGen's token scenarios) run the axes as given
    traces: dict[str, Longest] = {}  # a trace's longest does not depend on the axes: read once
    for kind, prompt, output in itertools.product(sorted(forms), prompts, outputs):
        try:
            if not kind.startswith("file:"):
                most = longest(kind, prompt, output)
            elif (most := traces.get(kind)) is None:
                most = traces[kind] = longest(kind, prompt, output)
        except (ValueError, OSError) as exc:
            raise SpecError(f"lengths: {exc}") from None
        if positions is not None and most.tokens > positions:
            raise SpecError(_too_long(kind, prompt, output, most, positions, workload.name))


def _too_long(
    form: str, prompt: int, output: int, most: Longest, positions: int, model: str
) -> str:
    if form == "fixed":
        return (
            f"prompt-len {prompt} + new-tokens {output} = {prompt + output} tokens is more than "
            f"{model}'s {positions} positions (a request's prompt and output must fit together)"
        )
    return (
        f"lengths {form[:60]!r} at prompt-len {prompt}, new-tokens {output} may ask "
        f"{most.tokens} tokens of one request, more than {model}'s {positions} positions"
    )
