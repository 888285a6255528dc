"""``python -m strided``: the command line (see ``strided._cli``)."""

import sys

from .cli import main

sys.exit(main())
