"""A custom backend module that calls sys.exit at import (imported by the probe only)."""

import sys

sys.exit(3)
