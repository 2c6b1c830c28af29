"""User code that must be refused where it enters: one module per kind, since each breaks
at import (a Workload is checked as it is declared) or never finishes importing."""
