"""Rich tables for the terminal, one module per scenario: the run's cells (run.py),
generate, serve, profile, train and the suite summary; and the live progress of a run."""
