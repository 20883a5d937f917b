"""Finding and running the qeval binary.

Everything this package knows about a record it learns from the binary: the binary reads, verifies
and summarises records; Python only starts it and reads what it prints.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Union

PathLike = Union[str, "os.PathLike[str]"]

_binary_override: Optional[str] = None


class QevalError(RuntimeError):
    """The qeval binary failed: ``message`` is what it printed on stderr (its own words), ``returncode``
    its exit status (qeval: 1 a failed check, 2 bad input or an error), ``command`` what was run."""

    def __init__(self, message: str, returncode: int, command: Sequence[str]):
        self.message = message.strip()
        self.returncode = returncode
        self.command = list(command)
        super().__init__(f"qeval exited with status {returncode}: {self.message}")


def set_binary(path: Optional[PathLike]) -> None:
    """Use this qeval binary from now on (None: look it up again)."""
    global _binary_override
    _binary_override = None if path is None else os.fspath(path)


def find_binary(binary: Optional[PathLike] = None) -> str:
    """The qeval binary: ``binary`` if given, else the one set by set_binary(), else $QEVAL_BINARY,
    else one beside the package (``qeval/bin/qeval``, or ``build/qeval`` of the repository this
    package sits in), else ``qeval`` on PATH."""
    tried: List[str] = []
    for candidate, origin in ((binary, "the binary argument"), (_binary_override, "qeval.set_binary()"),
                              (os.environ.get("QEVAL_BINARY"), "$QEVAL_BINARY")):
        if candidate:
            path = os.fspath(candidate)
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
            raise QevalError(f"{origin} names {path}, which is not an executable file", 127, [path])
    here = Path(__file__).resolve().parent
    for path in (here / "bin" / "qeval", here.parent.parent / "build" / "qeval"):
        tried.append(str(path))
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    found = shutil.which("qeval")
    if found:
        return found
    raise QevalError("no qeval binary found (tried " + ", ".join(tried) + " and PATH); build it with scripts/build, "
                     "or pass binary=..., call qeval.set_binary(...) or set $QEVAL_BINARY", 127, ["qeval"])


def run(args: Iterable[PathLike], binary: Optional[PathLike] = None, check: bool = True) -> subprocess.CompletedProcess:
    """Runs ``qeval ARGS`` to completion and returns its output (text); raises QevalError on a
    non-zero exit when ``check``."""
    command = [find_binary(binary)] + [os.fspath(a) for a in args]
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and done.returncode != 0:
        raise QevalError(done.stderr or done.stdout, done.returncode, command)
    return done


_WINDOWS = re.compile(r"\[(\d+(?:\.\d+)?)/(\d+)\] windows")


def run_with_progress(args: Iterable[PathLike], binary: Optional[PathLike] = None, quiet: bool = False,
                      description: str = "qeval") -> subprocess.CompletedProcess:
    """Runs ``qeval ARGS`` and passes its progress through to our stderr while it runs: a tqdm bar
    over the windows where tqdm is installed (the binary's other lines printed above it), else the
    binary's own lines. Raises QevalError on a non-zero exit."""
    command = [find_binary(binary)] + [os.fspath(a) for a in args]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    stderr_lines: List[str] = []
    stdout_chunks: List[str] = []
    reader = threading.Thread(target=lambda: stdout_chunks.append(proc.stdout.read()), daemon=True)
    reader.start()
    bar = None
    try:
        tqdm = None
        if not quiet:
            try:
                from tqdm.auto import tqdm  # type: ignore
            except ImportError:
                tqdm = None
        for line in proc.stderr:
            stderr_lines.append(line)
            if quiet:
                continue
            m = _WINDOWS.search(line)
            if tqdm is not None and m:
                done, total = float(m.group(1)), int(m.group(2))
                if bar is None or bar.total != total:
                    if bar is not None:
                        bar.close()
                    bar = tqdm(total=total, desc=description, unit="window", file=sys.stderr)
                bar.n = done
                bar.refresh()
            elif tqdm is not None:
                (bar.write if bar is not None else tqdm.write)(line.rstrip("\n"), file=sys.stderr)
            else:
                sys.stderr.write(line)
                sys.stderr.flush()
        proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        if bar is not None:
            bar.close()
    reader.join()
    stdout = "".join(stdout_chunks)
    if proc.returncode != 0:
        # The binary's message: its last lines on stderr, without the progress lines.
        message = "".join(l for l in stderr_lines if not _WINDOWS.search(l))
        raise QevalError(message or stdout, proc.returncode, command)
    return subprocess.CompletedProcess(command, proc.returncode, stdout, "".join(stderr_lines))


def option_args(options: dict) -> List[str]:
    """Keyword options as command-line flags: ``max_windows=8`` → ``--max-windows 8``, ``quiet=True``
    → ``--quiet``, ``False``/``None`` → left out, a list → the flag once per item."""
    out: List[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            out.append(flag)
        elif isinstance(value, (list, tuple)):
            for v in value:
                out += [flag, os.fspath(v) if isinstance(v, os.PathLike) else str(v)]
        else:
            out += [flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
    return out
