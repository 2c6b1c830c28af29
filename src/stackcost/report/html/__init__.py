"""The self-contained HTML report: the page (page.py, template.py) and its sections, one
module per scenario (run, quant, study, generate, serve, train, suite, costs/), with the
plotly figures they draw (plots.py) registered in page order (slots.py)."""
