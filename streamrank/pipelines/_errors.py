"""One line and an exit code for every failure of a pipeline script (the ``streamrank`` command's codes).

``run_main(prog, verbose, fn)`` calls ``fn()``; an exception becomes
``<prog>: error: <first line of the message>`` on stderr and the exit code of
:func:`streamrank.cli.exit_code` (3 not found, 4 bad data, 5 cannot
write — lock held, disk full —, 6 unsupported or out of memory, 1
unexpected); ``verbose`` adds the traceback, Ctrl-C exits 130.
"""
from __future__ import annotations

import sys
import traceback

__all__ = ["run_main"]


def run_main(prog, verbose, fn, *, interrupted="interrupted") -> int:
    from streamrank.cli import EXIT_BUG, EXIT_SIGINT, exit_code

    try:
        fn()
    except KeyboardInterrupt:
        print(f"{prog}: {interrupted}", file=sys.stderr, flush=True)
        return EXIT_SIGINT
    except Exception as exc:  # noqa: BLE001 - every failure: one line and an exit code
        code = exit_code(exc)
        if verbose:
            traceback.print_exc(file=sys.stderr)
        text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        text = text.strip()
        msg = text.splitlines()[0] if text else type(exc).__name__
        if isinstance(exc, MemoryError) and not text:
            msg = "out of memory (MemoryError); try a smaller --max-rows"
        hint = f" [{type(exc).__name__}; unexpected: rerun with --verbose and report it]" if code == EXIT_BUG else ""
        print(f"{prog}: error: {msg}{hint}", file=sys.stderr, flush=True)
        return code
    return 0
