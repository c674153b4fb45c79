"""Stores and block sources: zarr group/tuple stores, numpy/scipy/dask wrappers."""
