"""Views of stored results, one room per kind of view:

- frames/: the data every view reads (tidy frames, rows, captions), one module per scenario;
- terminal/: rich tables for the terminal, and a run's live progress;
- html/: the self-contained HTML report and its plotly figures;
- figures/: publication figures (matplotlib PNG and PDF);
- exports/: markdown, CSV and JSON.

Imports flow html | figures > exports | terminal > frames > the shared look at this level:
fit.py (a table that fits the terminal), marks.py (statuses and the marks views put on a
number), units.py, style.py (colours, axis labels), markdown.py (text for a markdown cell).
heldout_table.py is the held-out accuracy command's table.
"""
