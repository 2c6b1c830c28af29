"""The benchmark records page, generated at build time (mkdocs-gen-files) from the JSON each
benchmark wrote under benchmarks/results/: its date, machine and command, then its tables
as stored. The JSON is the record; this page only shows it, so no figure is copied by hand.

The benchmarks grew one at a time and their JSON has no single schema, so the page reads
what is there: a date from `date`, `started` or `finished_at` (else the day the file was
committed, said as such), the machine from `machine`, `cpu` or `isa`, the flags from
`args` or `settings`, a table for every list of rows, and a list for every flat mapping."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import mkdocs_gen_files

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
MAX_ROWS = 30
MAX_COLUMNS = 12


def _value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list) and all(not isinstance(x, dict | list) for x in v):
        return ", ".join(_value(x) for x in v)
    text = str(v).replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= 80 else text[:79] + "…"


def _scalar(v: Any) -> bool:
    return not isinstance(v, dict | list) or (
        isinstance(v, list) and len(v) <= 8 and all(not isinstance(x, dict | list) for x in v)
    )


def _committed(path: Path) -> str:
    """The day the file first entered the repository, from git (empty outside a clone)."""
    out = subprocess.run(
        ["git", "log", "--diff-filter=A", "--format=%cs", "--", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    lines = out.stdout.split()
    return lines[-1] if lines else ""


def _date(record: dict[str, Any], path: Path) -> str:
    for key in ("date", "started", "finished_at"):
        if isinstance(record.get(key), str):
            return record[key][:16].replace("T", " ")
    day = _committed(path)
    return f"{day} (committed; the record holds no date)" if day else "not recorded"


def _cpu(cpu: dict[str, Any]) -> str:
    """env.collect()'s CPU record as a line: model, cores, ISA flags."""
    flags = ", ".join(cpu.get("flags", []))
    cores = cpu.get("logical_cores")
    return f"{cpu.get('model', '?')}, {cores} logical cores" + (f" ({flags})" if flags else "")


def _machine(record: dict[str, Any]) -> str:
    for key in ("machine", "cpu", "isa"):
        found = record.get(key)
        if isinstance(found, dict):
            cpu = found.get("cpu") if isinstance(found.get("cpu"), dict) else found
            if "model" in cpu:
                return _cpu(cpu)
            return "; ".join(f"{k} {_value(v)}" for k, v in found.items() if _scalar(v))
        if found:
            return _value(found)
    return "not recorded"


def _script(record: dict[str, Any], path: Path) -> str:
    name = record.get("benchmark") if isinstance(record.get("benchmark"), str) else None
    scripts = sorted((p.stem for p in (ROOT / "benchmarks").glob("*.py")), key=len)
    for stem in reversed(scripts):
        if name == stem or (name is None and path.stem.replace("-", "_").startswith(stem)):
            return f"benchmarks/{stem}.py"
    return "benchmarks/ (the script is not named in the record)"


def _flags(record: dict[str, Any]) -> str:
    found = record.get("args") or record.get("settings")
    if not isinstance(found, dict):
        return ""
    return " ".join(f"--{k.replace('_', '-')} {_value(v)}" for k, v in found.items() if _scalar(v))


def _table(rows: list[dict[str, Any]]) -> list[str]:
    columns: list[str] = []
    for row in rows:
        columns += [k for k, v in row.items() if _scalar(v) and k not in columns]
    columns = columns[:MAX_COLUMNS]
    out = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    for row in rows[:MAX_ROWS]:
        out.append("| " + " | ".join(_value(row.get(c, "")) for c in columns) + " |")
    if len(rows) > MAX_ROWS:
        out.append(f"\n… {len(rows) - MAX_ROWS} more rows in the record.")
    return out


def _section(path: Path) -> list[str]:
    record = json.loads(path.read_text())
    relative = path.relative_to(ROOT)
    if not isinstance(record, dict):
        record = {"rows": record}
    flags = _flags(record)
    parts = [
        f"## {path.stem}",
        "",
        f"- **date:** {_date(record, path)}",
        f"- **machine:** {_machine(record)}",
        f"- **command:** `python {_script(record, path)}{' ' + flags if flags else ''}`",
        f"- **record:** `{relative}`",
        "",
    ]
    for key, value in record.items():
        if key in ("args", "settings", "machine", "cpu"):
            continue
        if isinstance(value, list) and value and all(isinstance(r, dict) for r in value):
            parts += [f"**{key}**", "", *_table(value), ""]
        elif isinstance(value, dict) and value and all(_scalar(v) for v in value.values()):
            parts += [f"**{key}**", "", *(f"- {k}: {_value(v)}" for k, v in value.items()), ""]
    return parts


def records_page() -> str:
    parts = [
        "# Benchmark records",
        "",
        "Every record a benchmark under `benchmarks/` wrote with `--json`, rendered from the "
        "JSON at build time: its date, machine and command, then its tables (the first "
        f"{MAX_COLUMNS} columns, {MAX_ROWS} rows). A record is what one machine measured on "
        "one day; compare only figures taken side by side in the same record.",
        "",
    ]
    for path in sorted(RESULTS.glob("*.json")):
        parts += _section(path)
    return "\n".join(parts) + "\n"


with mkdocs_gen_files.open("results/records.md", "w") as out:
    out.write(records_page())
