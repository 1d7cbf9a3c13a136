"""``python -m rustka.ops.cli``: the same as the ``rustka`` console script."""

import sys

from rustka.ops.cli import main

sys.exit(main())
