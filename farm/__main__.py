"""`python -m farm ...` is the `farm` command."""

import sys

from farm.cli import main

sys.exit(main())
