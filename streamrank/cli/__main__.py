"""``python -m streamrank.cli ...``: the same as the ``streamrank`` console script."""
import sys

from . import main

sys.exit(main())
