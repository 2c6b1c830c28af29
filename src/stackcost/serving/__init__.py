"""Serving decoders under load: an open-loop load generator, the engines it drives, and the
rate sweep built on them (`--scenario serve`).

- arrivals.py: when requests are sent (constant or Poisson rates, seeded);
- lengths.py: how long each request's prompt and output are (fixed, uniform, a file);
- engine.py: the contract an engine answers (submit a request, stream its tokens);
- client.py: the asyncio load generator, which timestamps every token as it arrives;
- records.py: per-rate figures from the requests' records (TTFT, TPOT, ITL, goodput);
- sweep.py: which rates a sweep measures, inside the user's time budget;
- engines/: one module per engine.
"""
