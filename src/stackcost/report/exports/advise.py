"""advise's answer in markdown, for a pull request or a decision record."""

from __future__ import annotations

from stackcost.advise.advice import Advice
from stackcost.report.frames.advise import header, headline, lines, pareto_title, row
from stackcost.report.markdown import md_escape


def markdown(advice: Advice, figure: str | None = None) -> str:
    """The headline, how it was decided, the Pareto figure (`figure`: the PNG's path,
    relative to the markdown file) and every cell's row."""
    out = [f"## advise: {md_escape(advice.model)}", "", f"**{md_escape(headline(advice))}**", ""]
    out += [f"- {md_escape(line)}" for line in lines(advice)]
    if figure:
        out += ["", f"![{md_escape(pareto_title(advice))}]({figure})"]
    head = header(advice)
    out += ["", "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    out += ["| " + " | ".join(md_escape(v) for v in row(e, advice)) + " |" for e in advice.entries]
    return "\n".join(out) + "\n"
