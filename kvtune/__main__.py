"""`python -m kvtune ...`: the same command as the `kvtune` script."""

import sys

from kvtune.cli import main

sys.exit(main())
