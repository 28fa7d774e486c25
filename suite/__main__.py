"""``python -m suite`` is the ``ampsuite`` command."""

import sys

from suite.cli import main

if __name__ == "__main__":
    sys.exit(main())
