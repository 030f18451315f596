"""IPython magics: ``%load_ext pylog_nb``, then ``%log_cluster``, ``%log_produce``, ...

Each magic parses its arguments, makes one call into ``pylog_nb.client`` or ``LocalCluster`` and
returns what that call returns (a DataFrame where there is data), so ``df = %log_consume t``
works. Failures are one ``UsageError`` line, never a traceback.
"""

from __future__ import annotations

from .log_magics import LogMagics


def load_ipython_extension(ipython) -> None:
    ipython.register_magics(LogMagics)


__all__ = ["LogMagics", "load_ipython_extension"]
