"""Reference pages generated at build time (mkdocs-gen-files), never hand-copied: the
command line from the parsers themselves, the backend table from the registry. A new flag
or rung appears in the docs with no docs edit."""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import re
from pathlib import Path

import mkdocs_gen_files

from stackcost.backends import REGISTRY, load_backend
from stackcost.backends.base import Backend
from stackcost.cli import build_parser
from stackcost.serving.engines import ENGINES

# Where a runtime's code lives besides its rung: what its module imports of these.
PARTS = re.compile(r"stackcost\.(?:quantize|native|generation)\.\w+")


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps its subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def cli_page() -> str:
    parser = build_parser()
    parts = [
        "# Command line",
        "",
        "Every command and flag, as `stackcost COMMAND --help` prints them (generated from "
        "the parsers at build time).",
        "",
    ]
    for name, sub in _subcommands(parser).items():
        sub.prog = f"stackcost {name}"
        text = sub.format_help()
        parts += [f"## `stackcost {name}`", "", "```text", text.rstrip(), "```", ""]
    return "\n".join(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def code_of(name: str, backend: Backend) -> list[str]:
    """Every module that holds this runtime's code, found from the registry: its rung, its
    generator, what the rung imports of quantize/, native/ and generation/, and its
    serving engine."""
    module = REGISTRY[name].split(":")[0]
    found = [module, *([backend.generator.split(":")[0]] if backend.generator else [])]
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    found += PARTS.findall(Path(spec.origin).read_text())
    if (engine := ENGINES.get(name)) is not None:
        found += re.findall(r"stackcost\.serving\.engines\.\w+", inspect.getsource(engine[1]))
    shared = {"stackcost.generation.base", "stackcost.generation.metrics"}
    paths = [m for m in dict.fromkeys(found) if m not in shared]
    return [f"`{m.removeprefix('stackcost.').replace('.', '/')}.py`" for m in paths]


def backends_page() -> str:
    rows = [
        "# Backend table",
        "",
        "Every rung in the registry, top (most Python) to bottom, with what it runs "
        "(generated from `stackcost.backends.REGISTRY` at build time; `stackcost list "
        "backends` says which are available on a machine, and why not). **code** is every "
        "module that holds the runtime's code: its rung, its generator, its quantization, its "
        "native program and its serving engine.",
        "",
        "| backend | modes | devices | precisions | generates | description | options | code |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name in REGISTRY:
        b = load_backend(name)
        caps, gen = b.capabilities, b.generate_capabilities()
        options = ", ".join(f"`{k}`" for k in b.options) or "—"
        rows.append(
            "| "
            + " | ".join(
                [
                    f"`{name}`",
                    ", ".join(sorted(caps.modes - {"generate"})) or "—",
                    ", ".join(sorted(caps.devices)),
                    ", ".join(sorted(caps.precisions)) or "—",
                    ", ".join(sorted(gen.precisions)) if gen else "—",
                    _cell(b.description),
                    options,
                    "<br>".join(code_of(name, b)),
                ]
            )
            + " |"
        )
    return "\n".join(rows) + "\n"


with mkdocs_gen_files.open("reference/cli.md", "w") as out:
    out.write(cli_page())
with mkdocs_gen_files.open("reference/backends.md", "w") as out:
    out.write(backends_page())
