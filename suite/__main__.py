"""``python -m ampsuite`` is the ``ampsuite`` command."""

import sys

from ampsuite.cli import main

if __name__ == "__main__":
    sys.exit(main())
