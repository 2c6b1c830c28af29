"""Plain-text exports: markdown, CSV and JSON (formats.py), one module per scenario's
markdown table (run, generate, serve, scenarios, study)."""
