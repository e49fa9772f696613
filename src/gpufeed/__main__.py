"""``python -m gpufeed ...``: see :mod:`gpufeed.cli`."""

import sys

from gpufeed.cli import main

sys.exit(main())
