#!/usr/bin/env python3
"""One probe case of the Python package (python/qeval): python_case.py QEVAL CASE.py

Runs CASE.py with the package of this repository imported as `qeval`, `QEVAL` the binary's path
and `D` the case's folder. The outcome, as tests/hardening/probe.py reads it:
  exit 2 and one line "qeval: error: ..."  the package refused: a QevalError (the binary's words, or
                                            the package's about the binary it could not run) or a
                                            plain ValueError the package raises itself
  exit 70 and a traceback                   any other exception escaped the package (JSONDecodeError,
                                            KeyError, TypeError ...): the package's crash
  exit 0                                    the case ran through
"""
import json
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
import qeval  # noqa: E402

QEVAL, CASE = sys.argv[1], Path(sys.argv[2])
try:
    exec(compile(CASE.read_text(), CASE.name, "exec"), {"qeval": qeval, "QEVAL": QEVAL, "D": str(CASE.parent),
                                                         "json": json, "Path": Path})
except qeval.QevalError as e:
    lines = [l.strip() for l in (e.message or str(e)).splitlines() if l.strip()]
    lines = [l[len("qeval: error: "):] if l.startswith("qeval: error: ") else l for l in lines]
    print("qeval: error: " + " / ".join(lines) + f" (status {e.returncode})", file=sys.stderr)
    sys.exit(2)
except Exception as e:  # noqa: BLE001
    if type(e) is ValueError:  # the package's own refusals (a record of another kind ...)
        print(f"qeval: error: {e}", file=sys.stderr)
        sys.exit(2)
    traceback.print_exc()
    sys.exit(70)
print("case ran through")
