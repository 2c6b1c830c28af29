"""One module per engine the serve scenario drives (serving/engine.py's contract)."""
