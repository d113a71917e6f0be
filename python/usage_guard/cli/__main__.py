"""`python -m usage_guard.cli ...`: the `usage-guard` command."""

import sys

from . import main

sys.exit(main())
