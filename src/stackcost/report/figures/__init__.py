"""Publication figures with matplotlib (PNG and PDF): write.py writes every figure the runs
support, one module per scenario's (run, quant, costs, generate)."""
