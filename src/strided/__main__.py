"""``python -m strided``: the command line (see ``strided._cli``)."""

import sys

from ._cli import main

sys.exit(main())
