"""The data every view reads, one module per scenario: tidy frames of the timed loop's
cells (tidy.py) and what quantized cells add (quant.py, pareto.py); LoadGen's scenario
cells, generate and serve runs' rows, training epochs and agreement, the suite summary,
the study across machines, the profiled cells' costs, and the words captions share
(which weights a run had). They draw nothing (no table, no figure): every view imports
them, they import no view."""
