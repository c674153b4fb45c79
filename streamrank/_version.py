"""The package's version, in a module that imports nothing (``streamrank.__version__`` re-exports it)."""
__version__ = "0.1.0.dev0"
