"""qeval from Python: run the qeval binary, read its verified records as pandas DataFrames.

    import qeval
    r = qeval.evaluate("models/stories260K/stories260K.bin", "text/tinystories/validation-head.txt",
                       schemes=["int8-coarse", "int8-fine"], max_windows=8)
    r.penalties(); r.statistics(per_layer=True); r.timings()
    qeval.compare(["A.json", "B.json"])

The binary is the only reader of the record format: it verifies every record before this package
looks at it (python/README.md).
"""
from ._binary import QevalError, find_binary, run, set_binary
from .evaluate import evaluate
from .record import Record, compare

__all__ = ["evaluate", "Record", "compare", "QevalError", "find_binary", "set_binary", "run"]
__version__ = "0.1.0"
