"""The inference-framework study's tables (frames/study.py) in GitHub markdown."""

from __future__ import annotations

from stackcost.report.frames import study
from stackcost.report.markdown import md_escape


def markdown(tables: list[study.StudyTable]) -> str:
    """The tables in GitHub markdown (bold best per column, * beats the reference)."""
    out = []
    for t in tables:
        out += [f"#### {md_escape(t.title)}", "", f"_{md_escape(study.note(t))}_", ""]
        out.append("| framework | " + " | ".join(map(md_escape, t.table.columns)) + " |")
        out.append("| --- |" + " ---: |" * len(t.table.columns))
        best = {c: t.best(c) for c in t.table.columns}
        for series in t.table.index:
            cells = []
            for c in t.table.columns:
                text = md_escape(study.cell_text(t, series, c))
                cells.append(f"**{text}**" if best[c] == series else text)
            out.append(f"| {md_escape(series)} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def quant_markdown(tables: list[study.QuantTable]) -> str:
    """The quantized tables in GitHub markdown, a slower speedup in bold."""
    out = []
    for t in tables:
        out += [
            f"#### {md_escape(t.title)}: quantized precisions",
            "",
            f"_{md_escape(study.QUANT_NOTE)}_",
            "",
        ]
        out.append("| framework | " + " | ".join(map(md_escape, t.header)) + " |")
        out.append("| --- |" + " ---: |" * len(t.header))
        for framework, cells in t.rows:
            shown = [
                f"**{md_escape(c)}**" if (framework, i) in t.slower else md_escape(c)
                for i, c in enumerate(cells)
            ]
            out.append(f"| {md_escape(framework)} | " + " | ".join(shown) + " |")
        out.append("")
    return "\n".join(out)
