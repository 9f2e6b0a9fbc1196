"""vramtrace: the `vramtrace` command and its recorder library, installed by pip.

Nothing here is needed to run `vramtrace`; :func:`preload_path` tells where the recorder library
is, for a launcher that sets ``LD_PRELOAD`` itself::

    LD_PRELOAD=$(python -c 'import vramtrace; print(vramtrace.preload_path())') python train.py
"""

from pathlib import Path

__all__ = ["preload_path"]


def preload_path() -> str:
    """The absolute path of ``libvramtrace_preload.so`` inside this package."""
    return str(Path(__file__).resolve().parent / "libvramtrace_preload.so")
