"""``streamrank migrate STORE DST``: :func:`streamrank.io._migrate.migrate` on the command line."""
from __future__ import annotations

__all__ = ["cmd_migrate"]


def cmd_migrate(args) -> int:
    from ..io._migrate import migrate

    r = migrate(args.store, args.dst, storage_options=getattr(args, "storage_options", None))
    print(f"migrated {r['source']} -> {r['destination']}: {r['objects']} objects "
          f"({r['bytes'] / 2**20:.1f} MiB) in one commit {r['snapshot']}; {r['batches']} batch(es) verified at both")
    return 0
