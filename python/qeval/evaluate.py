"""qeval.evaluate: one `qeval eval` run from Python."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Optional, Sequence, Union

from ._binary import PathLike, option_args, run_with_progress
from .record import Record

__all__ = ["evaluate"]


def evaluate(model: PathLike, data: Optional[PathLike] = None, schemes: Union[None, str, Sequence[str]] = None,
             out: Optional[PathLike] = None, binary: Optional[PathLike] = None, quiet: bool = False,
             **options) -> Record:
    """Runs ``qeval eval --model MODEL --data DATA --schemes S1,S2 --out OUT [options]`` and returns
    the record it wrote, verified by the binary.

    Every other keyword is a flag of `qeval eval` (`qeval eval --help`): ``max_windows=8`` →
    ``--max-windows 8``, ``attention_statistics=True`` → ``--attention-statistics``, a list repeats
    the flag. ``out`` defaults to a file in a new temporary folder. Progress goes to stderr (a tqdm
    bar where tqdm is installed); a failed run raises QevalError with the binary's message and exit
    status. A folder of checkpoints (``checkpoint-N/``, ``step-N/``) gives a series record.
    """
    if out is None:
        out = Path(tempfile.mkdtemp(prefix="qeval-eval-")) / "record.json"
    args = ["eval", "--model", os.fspath(model)]
    if data is not None:
        args += ["--data", os.fspath(data)]
    if schemes is not None:
        if not schemes:  # "--schemes ''" would run the binary's default list, not "no scheme"
            raise ValueError("evaluate: schemes is empty; give at least one scheme, or None for the binary's default list")
        args += ["--schemes", schemes if isinstance(schemes, str) else ",".join(schemes)]
    args += ["--out", os.fspath(out)]
    args += option_args(options)
    done = run_with_progress(args, binary, quiet=quiet, description=f"qeval {Path(os.fspath(model)).name}")
    record = Record.load(out, binary=binary, allow_partial=bool(options.get("shard")))
    record.stdout = done.stdout
    return record
