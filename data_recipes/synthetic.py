"""Kept for checkouts: the recipe is the installed command ``streamrank recipe synthetic``
(:mod:`streamrank.recipes.synthetic`); this script runs the same ``main(argv)``."""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]   # nothing here shadows a package
sys.path.insert(0, os.path.dirname(_HERE))                                        # the checkout, without pip install

from streamrank.recipes.synthetic import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
