"""`python -m vmexplorer` is the `vmexplorer` command."""

import sys

try:
    from .cli import main

    sys.exit(main())
except KeyboardInterrupt:  # Ctrl-C before main's handlers exist (cli.EXIT_INTERRUPTED, not yet imported)
    sys.exit(130)
