"""``python -m lakeprep_train`` is ``python -m lakeprep_train.train``."""

from __future__ import annotations

import sys

from lakeprep_train.train import main

if __name__ == "__main__":
    sys.exit(main())
