"""The deployment decision for one model: which cell (rung, precision, batch, threads) to
run under the user's constraints, searched within a budget and decided by measurement.

Pure and stored-data only: what a constraint allows (`constraints`), what a cell's
measurement says (`evidence`), which cells a screening prunes and which finalist wins
(`search`), and the answer as stored (`advice`). The measuring is the API's
(`stackcost.api.advise`)."""
