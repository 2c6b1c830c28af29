"""The SQLite store: schema and migrations, writes and queries (database), the integrity check
(check), merging stores (merge) and the typed view of a stored run (runs)."""
