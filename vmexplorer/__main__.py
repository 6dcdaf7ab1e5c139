"""`python -m vmexplorer` is the `vmexplorer` command."""

import sys

# only when run: a server that imports this module by name (Panel's component route did, for any module a
# URL named) must not find itself running the command line
if __name__ == "__main__":
    try:
        from .cli import main

        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C before main's handlers exist (cli.EXIT_INTERRUPTED, not yet imported)
        sys.exit(130)
