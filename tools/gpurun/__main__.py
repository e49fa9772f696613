"""``python tools/gpurun ...``: the command line (:mod:`gpurun.cli`)."""

import sys
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parents[1])  # tools/ (not gpurun/ itself): `import gpurun`

from gpurun.cli import main  # noqa: E402

sys.exit(main(sys.argv))
