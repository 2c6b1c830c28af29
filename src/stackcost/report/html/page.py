"""One self-contained HTML report: plotly.js inlined once, no network, every string escaped.

The page is put together here; each section's tables and figures come from its own module
(run, quant, generate, serve, train, costs/, suite), which register their figures in the
page's order (slots.py). The template (template.py) lays them out."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd
from markupsafe import Markup
from plotly.offline import get_plotlyjs

from stackcost.advise.advice import Advice
from stackcost.backends import BASELINE
from stackcost.env import now
from stackcost.report.frames import quant, study, tidy
from stackcost.report.frames.scenarios import CAPTION as SCENARIO_CAPTION
from stackcost.report.frames.scenarios import SCENARIO_HEADER, scenario_rows
from stackcost.report.html import costs
from stackcost.report.html.advise import advice_section
from stackcost.report.html.generate import generation_section
from stackcost.report.html.quant import quantization_section
from stackcost.report.html.run import counts, inference_plots, inference_tables
from stackcost.report.html.serve import serving_section
from stackcost.report.html.slots import Figures
from stackcost.report.html.template import PAGE
from stackcost.report.html.train import training_slots
from stackcost.report.style import series_colors
from stackcost.store.runs import RunResult


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Nested env dicts as 'versions.torch' -> '2.13.0' rows."""
    if isinstance(value, dict):
        out: list[tuple[str, str]] = []
        for k, v in value.items():
            out += _flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    if isinstance(value, list):
        text = ", ".join(str(v) for v in value) if value else "—"
    else:
        text = "—" if value is None else str(value)
    return [(prefix, text)]


def _env_rows(env: dict[str, Any]) -> list[tuple[str, str]]:
    """The flattened record, with the int8 ISA features named and placed after the CPU's
    flags: what a quantized cell's speed depends on, read at a glance."""
    rows = _flatten(env)
    isa = quant.isa_text(env)
    if not isa:
        return rows
    keys = [k for k, _ in rows]
    at = keys.index("cpu.flags") + 1 if "cpu.flags" in keys else 0
    return [*rows[:at], (quant.ISA_LABEL, isa), *rows[at:]]


def _costs(
    runs: list[RunResult], summ: pd.DataFrame, colors: dict[str, str], figs: Figures
) -> dict[str, Any]:
    """The "where the time goes" section: its figures registered, its tables as rows."""
    sec = costs.section(runs, summ, colors)
    return {
        "profiled": sec.profiled,
        "note": sec.note,
        "plots": {k: figs.add(p.fig, p.note) for k, p in sec.panels.items()},
        "notes": {k: p.notes for k, p in sec.panels.items()},
        "op_tables": sec.op_tables,
        "peak_header": sec.peak_header,
        "peak_rows": sec.peak_rows,
        "best_tables": sec.best_tables,
    }


def _inference_only(runs: list[RunResult]) -> list[RunResult]:
    """The runs with their timed loop's inference cells only: what the inference views
    see (training runs and LoadGen scenario cells have sections of their own)."""
    return [
        dataclasses.replace(
            r,
            records=[x for x in r.records if x[0].mode == "infer" and x[0].scenario is None],
        )
        for r in runs
    ]


def _nav(
    has_cells: bool, sections: dict[str, bool], quantization: bool, batch_search: bool
) -> list[tuple[str, str]]:
    """The page's navigation: (anchor, name) of each section the page has, in page order.
    `sections` says which of training, scenarios, generation and serving it has."""
    inference_nav = [
        ("latency", "latency"),
        ("throughput", "throughput"),
        ("memory", "memory"),
        ("ratios", "ratios"),
        ("startup", "startup"),
        ("verification", "verification"),
        *([("quantization", "quantized precisions")] if quantization else []),
        ("failures", "failures"),
        ("untrusted", "unstable & disturbed"),
        *([("best-batch", "best batch")] if batch_search else []),
        ("cells", "all cells"),
        ("costs", "where the time goes"),
    ]
    return [
        *([("advice", "advice")] if sections.get("advice") else []),
        *([("training", "training")] if sections["training"] else []),
        *([("scenarios", "LoadGen scenarios")] if sections["scenarios"] else []),
        *([("generation", "token generation")] if sections["generation"] else []),
        *([("serving", "serving under load")] if sections["serving"] else []),
        *(inference_nav if has_cells else []),
        ("environment", "environment"),
    ]


def _run_records(runs: list[RunResult]) -> list[dict[str, Any]]:
    """The environment section: each run's machine record and spec."""
    return [
        {
            "run_id": r.run_id,
            "env": _env_rows(r.env),
            "spec": json.dumps(r.spec, indent=2, sort_keys=True, default=str),
        }
        for r in runs
    ]


def render_html(
    runs: list[RunResult],
    baseline: str = BASELINE,
    title: str = "",
    suite: tuple[str, Sequence[str]] | None = None,
    reference: str | None = None,
    advice: Sequence[Advice] = (),
) -> str:
    """The whole report as one HTML string that opens offline. `suite` is the suite's
    name and workload labels, when the runs are a named suite's (`report --suite`);
    `reference` the machine column the study tables' asterisks compare with; `advice` the
    stored `stackcost advise` answers shown first."""
    inference = _inference_only(runs)
    summ = tidy.summary(inference, baseline)
    colors = series_colors(tidy.series_order(summ, baseline)) if len(summ) else {}
    study_tables = study.study_tables(inference, reference)
    # Each section registers its figures in page order: their ids follow it.
    figs = Figures()
    answers = advice_section(list(advice), figs)
    generation = generation_section(runs, baseline, figs)
    serving = serving_section(runs, figs)
    plot_slots = inference_plots(summ, colors, baseline, study_tables, figs)
    training = training_slots(runs, figs)
    cost_section = _costs(inference, summ, colors, figs) if len(summ) else None
    quantization = quantization_section(inference, summ, colors, figs) if len(summ) else None
    scenarios = scenario_rows(runs)  # serving cells too: LoadGen's headline
    search_runs = tidy.wants_batch_search(runs)
    sections = {
        "training": bool(training),
        "scenarios": bool(scenarios),
        "generation": bool(generation["generation"]),
        "serving": bool(serving["serving"]),
        "advice": bool(answers),
    }
    context = {
        "title": title or "stackcost report",
        "generated_at": now(),
        "baseline": baseline,
        "has_cells": len(summ) > 0,
        "counts": counts(summ),
        "nav": _nav(len(summ) > 0, sections, bool(quantization), bool(search_runs)),
        "plots": plot_slots,
        "size_axes": tidy.size_columns(summ),
        "advice": answers,
        "training": training,
        "scenarios": scenarios,
        "scenario_header": SCENARIO_HEADER,
        "scenario_caption": SCENARIO_CAPTION,
        **generation,
        **serving,
        **inference_tables(summ, runs, baseline, study_tables, search_runs),
        "runs": _run_records(runs),
        "costs": cost_section,
        "quantization": quantization,
        # Runs of several models (a `stackcost suite`): TorchBench's summary first.
        "suite": _suite(runs, suite, baseline),
        "figures": figs.items,
        "plotlyjs": get_plotlyjs(),
    }
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    return env.from_string(PAGE).render(**context)


def write_html(runs: list[RunResult], path: str | Path, baseline: str = BASELINE) -> Path:
    path = Path(path)
    path.write_text(render_html(runs, baseline), encoding="utf-8")
    return path


def _suite(runs: list[RunResult], suite: tuple[str, Sequence[str]] | None, baseline: str) -> Markup:
    """The suite summary: of a named suite, or of any runs that span several models."""
    from stackcost.report.html.suite import suite_section

    if suite is not None:
        name, expected = suite
        return Markup(suite_section(runs, name, expected, baseline=baseline))
    models = {cell.model.name for r in runs for cell, _ in r.records if cell.mode != "train"}
    return Markup(suite_section(runs, baseline=baseline) if len(models) > 1 else "")
