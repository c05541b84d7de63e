"""`python -m farm ...` is the `farm` command."""

import sys

from farm.cli.main import main

sys.exit(main())
