"""`python -m vmexplorer` is the `vmexplorer` command."""

import sys

from .cli import main

sys.exit(main())
