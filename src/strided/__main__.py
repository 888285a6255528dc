"""``python -m strided``: the command line (see ``strided.cli``)."""

import sys

from .cli import main

sys.exit(main())
