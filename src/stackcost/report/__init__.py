"""Views of stored results: terminal tables now; HTML reports and figures later."""
