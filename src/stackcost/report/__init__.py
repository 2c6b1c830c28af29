"""Views of stored results: terminal table, HTML report, figures, md/csv/json exports."""
