"""Finding and running the qeval binary.

Everything this package knows about a record it learns from the binary: the binary reads, verifies
and summarises records; Python only starts it and reads what it prints.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
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


def _failure(command: Sequence[str], returncode: int, message: str) -> QevalError:
    """The error for a binary that failed: its own message, or what happened when it printed none
    (killed by a signal, a silent non-zero exit)."""
    message = message.strip()
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        what = f"{command[0]} was killed by signal {-returncode} ({name}) running `{' '.join(command[1:3])}`"
        return QevalError(what + (": " + message if message else ""), returncode, command)
    if not message:
        message = f"{command[0]} exited with status {returncode} without a message, running `{' '.join(command[1:3])}`"
    return QevalError(message, returncode, command)


def _start_error(command: Sequence[str], e: OSError) -> QevalError:
    return QevalError(f"cannot run {command[0]} as the qeval binary: {e.strerror or e}", 126, command)


def run(args: Iterable[PathLike], binary: Optional[PathLike] = None, check: bool = True) -> subprocess.CompletedProcess:
    """Runs ``qeval ARGS`` to completion and returns its output (text; bytes that are not UTF-8 are
    replaced); raises QevalError on a non-zero exit when ``check``, and when the binary cannot be
    started."""
    command = [find_binary(binary)] + [os.fspath(a) for a in args]
    try:
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
    except OSError as e:
        raise _start_error(command, e) from None
    if check and done.returncode != 0:
        raise _failure(command, done.returncode, done.stderr or done.stdout)
    return done


def run_json(args: Iterable[PathLike], binary: Optional[PathLike] = None, keys: Sequence[str] = (),
             rows: bool = False) -> dict:
    """Runs ``qeval ARGS`` (a command that prints JSON) and returns the object it printed; raises
    QevalError when the binary fails or prints anything else (a program that is not qeval), an
    object with none of ``keys``, or (``rows``) one whose first key found is not a non-empty list
    of objects."""
    done = run(args, binary)
    try:
        out = json.loads(done.stdout)
    except ValueError:
        out = None
    found = [out[k] for k in keys if k in out] if isinstance(out, dict) else []
    if not isinstance(out, dict) or (keys and not found) or \
            (rows and not (isinstance(found[0], list) and found[0] and all(isinstance(r, dict) for r in found[0]))):
        shown = done.stdout.strip()[:120] or "nothing"
        raise QevalError(f"{done.args[0]} is not a qeval binary this package can use: "
                         f"`qeval {' '.join(done.args[1:3])}` "
                         f"should print a JSON object with {' or '.join(repr(k) for k in keys) or 'its result'}"
                         f"{' (a non-empty list of rows)' if rows else ''}, "
                         f"it printed {shown!r}", done.returncode, done.args)
    return out


_WINDOWS = re.compile(r"\[(\d+(?:\.\d+)?)/(\d+)\] windows")


def run_with_progress(args: Iterable[PathLike], binary: Optional[PathLike] = None, quiet: bool = False,
                      description: str = "qeval") -> subprocess.CompletedProcess:
    """Runs ``qeval ARGS`` and passes its progress through to our stderr while it runs: a tqdm bar
    over the windows where tqdm is installed (the binary's other lines printed above it), else the
    binary's own lines. Raises QevalError on a non-zero exit."""
    command = [find_binary(binary)] + [os.fspath(a) for a in args]
    try:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                                bufsize=1)
    except OSError as e:
        raise _start_error(command, e) from None
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
        raise _failure(command, proc.returncode, message or stdout)
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
