"""QevalCallback: qeval's penalties and statistics in a Hugging Face Trainer's own logs.

    from qeval.integrations.transformers import QevalCallback
    cb = QevalCallback(data="tokens.bin", schemes=["int8-coarse", "int8-fine"], every=500,
                       token_dtype="uint16", seq_len=128, max_windows=16)
    trainer = Trainer(..., callbacks=[cb])
    trainer.train()            # cb.series_record: the run's series record

Each checkpoint the Trainer saves (``save_steps``) is evaluated by the qeval binary in a process of
its own, so training never waits for it; one evaluation runs at a time, the checkpoints saved
meanwhile are queued. A finished evaluation is logged through ``trainer.log`` at the next training
step, so every ``report_to`` backend (TensorBoard, W&B, MLflow, ...) receives it:
``qeval/<scheme>/dppl``, ``qeval/<scheme>/paired_dnll`` (and ``_se``), ``qeval/<scheme>/kl``,
``qeval/<scheme>/top1``, ``qeval/ppl_full`` and the headline statistics of full precision
(``qeval/kurtosis_first``, ``qeval/max_abs_first``, ``qeval/first_attn_pct``, ...), with
``qeval/checkpoint_step`` the step of the checkpoint measured. After the last save it waits for
the queue, and writes the series record of the checkpoints it evaluated (``qeval eval`` over them,
which reuses each checkpoint's record: nothing is evaluated twice).

Each checkpoint's weights are hard-linked (copied where links are impossible) into the series
folder when it is saved, so ``save_total_limit`` may delete the Trainer's copy before its turn.
"""
from __future__ import annotations

import math
import os
import queue
import shutil
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

from transformers import TrainerCallback  # type: ignore

from .._binary import PathLike, QevalError, find_binary, option_args
from ..record import Record

__all__ = ["QevalCallback"]

# Files of an HF checkpoint that qeval does not read (optimizer and RNG state: most of its size).
_NOT_NEEDED = ("optimizer.pt", "scheduler.pt", "training_args.bin", "scaler.pt")


def _snapshot(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if not f.is_file() or f.name in _NOT_NEEDED or f.name.startswith("rng_state"):
            continue
        target = dst / f.name
        if target.exists():
            target.unlink()
        try:
            os.link(f, target)
        except OSError:
            shutil.copy2(f, target)


class QevalCallback(TrainerCallback):
    """Evaluates each saved checkpoint with qeval in the background and logs the results through
    the Trainer.

    data, schemes: as ``qeval eval --data / --schemes`` (schemes: a list or a comma-separated
        string; None: qeval's default presets).
    every: evaluate a saved checkpoint only when at least this many steps passed since the last one
        evaluated (None or 0: every saved checkpoint). The final checkpoint is always evaluated.
    out: the series record (default ``<output_dir>/qeval-series.json``; the checkpoints' records
        and weight snapshots go into the folder of the same name without .json).
    binary: the qeval binary (default: qeval.find_binary()).
    trainer: the Trainer to log through; found by itself when the callback is passed to
        ``Trainer(callbacks=[...])`` or ``trainer.add_callback``, or give it with ``attach``.
    prefix: of the logged names ("qeval").
    **options: further ``qeval eval`` flags (``max_windows=8``, ``seq_len=128``,
        ``token_dtype="uint16"``, ``threads=1``, ...).
    """

    def __init__(self, data: PathLike, schemes: Union[None, str, Sequence[str]] = None, every: Optional[int] = None,
                 out: Optional[PathLike] = None, binary: Optional[PathLike] = None, trainer: Any = None,
                 prefix: str = "qeval", **options: Any):
        self.data = os.fspath(data)
        self.schemes = schemes if schemes is None or isinstance(schemes, str) else ",".join(schemes)
        self.every = every or 0
        self.out = None if out is None else Path(out)
        self.binary = find_binary(binary)
        self.trainer = trainer
        self.prefix = prefix
        self.options = options
        self.logged: List[Dict[str, float]] = []  # what was passed to trainer.log, in order
        self.records: Dict[int, Record] = {}  # step → the checkpoint's verified record
        self.errors: List[QevalError] = []
        self.series_record: Optional[Record] = None
        self._queue: "queue.Queue[Optional[int]]" = queue.Queue()
        self._done: "queue.Queue[tuple]" = queue.Queue()
        self._worker: Optional[threading.Thread] = None
        self._queued: List[int] = []
        self._last_queued: Optional[int] = None
        self._logging = False
        self._finished = False

    # -- the Trainer -----------------------------------------------------------------------------------------------
    def attach(self, trainer: Any) -> "QevalCallback":
        self.trainer = trainer
        return self

    def _find_trainer(self) -> None:
        """The Trainer whose callback handler is calling us: the `self` of a calling frame."""
        if self.trainer is not None:
            return
        try:
            from transformers import Trainer  # type: ignore
        except ImportError:  # pragma: no cover
            return
        frame = sys._getframe(1)
        while frame is not None:
            candidate = frame.f_locals.get("self")
            if isinstance(candidate, Trainer):
                self.trainer = candidate
                return
            frame = frame.f_back

    # -- paths -----------------------------------------------------------------------------------------------------
    def _series_path(self, args) -> Path:
        if self.out is None:
            self.out = Path(args.output_dir) / "qeval-series.json"
        self.out = self.out.absolute()
        return self.out

    def _folder(self, args) -> Path:
        path = self._series_path(args)
        return path.parent / path.stem

    def _eval_args(self, model: Path, out: Path) -> List[str]:
        args = ["eval", "--model", str(model), "--data", self.data, "--out", str(out)]
        if self.schemes is not None:
            args += ["--schemes", self.schemes]
        return args + option_args(self.options)

    # -- the background evaluation ---------------------------------------------------------------------------------
    def _work(self, folder: Path) -> None:
        while True:
            step = self._queue.get()
            if step is None:
                return
            record_path = folder / f"step-{step}.json"
            command = [self.binary] + self._eval_args(folder / "checkpoints" / f"checkpoint-{step}", record_path) + ["--quiet"]
            try:
                # A process of its own: training goes on while it runs (and it may be niced by the user's options).
                done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      errors="replace")
                if done.returncode != 0:
                    raise QevalError(done.stderr or done.stdout, done.returncode, command)
                self._done.put((step, Record.load(record_path, binary=self.binary), None))
            except QevalError as e:
                self._done.put((step, None, e))
            except Exception as e:  # noqa: BLE001 - reported through the log, never into training
                self._done.put((step, None, QevalError(repr(e), -1, command)))

    def _start(self, args) -> None:
        if self._worker is None:
            folder = self._folder(args)
            (folder / "checkpoints").mkdir(parents=True, exist_ok=True)
            self._worker = threading.Thread(target=self._work, args=(folder,), name="qeval-callback", daemon=True)
            self._worker.start()

    def metrics(self, record: Record, step: int) -> Dict[str, float]:
        """The values logged for one checkpoint's record."""
        p = self.prefix
        out: Dict[str, float] = {f"{p}/checkpoint_step": float(step)}
        head = record.headline()
        for key in ("ppl_full", "kurtosis_first", "kurtosis_rest", "max_abs_first", "max_abs_rest", "first_attn_pct",
                    "sink_rate_pct"):
            v = head.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[f"{p}/{key}"] = float(v)
        pen = record.penalties()
        for scheme, row in pen.iloc[1:].iterrows():  # the first scheme is full precision, the reference
            for key, column in (("dppl", "dppl"), ("paired_dnll", "paired_dnll_mean"), ("paired_dnll_se", "paired_dnll_se"),
                                ("kl", "kl_mean"), ("top1", "top1_agreement")):
                v = row[column]
                if not (isinstance(v, float) and math.isnan(v)):
                    out[f"{p}/{scheme}/{key}"] = float(v)
        return out

    def _log(self, metrics: Dict[str, float], state) -> None:
        self.logged.append(dict(metrics))
        if self.trainer is not None:
            self.trainer.log(dict(metrics))
        else:  # no Trainer to log through: at least its history has them
            state.log_history.append({**metrics, "step": state.global_step})

    def _drain(self, state, wait: bool = False) -> None:
        if self._logging:
            return
        self._logging = True
        try:
            while self._queued:
                try:
                    step, record, error = self._done.get(block=wait)
                except queue.Empty:
                    return
                self._queued.remove(step)
                if error is not None:
                    self.errors.append(error)
                    warnings.warn(f"qeval: checkpoint {step} was not evaluated: {error}")
                    continue
                self.records[step] = record
                self._log(self.metrics(record, step), state)
        finally:
            self._logging = False

    def _finish(self, args, state) -> None:
        if self._finished:
            return
        self._finished = True
        self._drain(state, wait=True)
        if self._worker is not None:
            self._queue.put(None)
            self._worker.join()
        if not self.records:
            return
        # The run's series record over the checkpoints evaluated; their records are reused.
        folder = self._folder(args)
        listing = folder / "checkpoints.list"
        listing.write_text("".join(f"{folder / 'checkpoints' / f'checkpoint-{s}'} {s}\n" for s in sorted(self.records)))
        command = [self.binary] + self._eval_args(listing, self._series_path(args)) + ["--series", "on", "--quiet"]
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
        if done.returncode != 0:
            error = QevalError(done.stderr or done.stdout, done.returncode, command)
            self.errors.append(error)
            warnings.warn(f"qeval: the series record was not written: {error}")
            return
        self.series_record = Record.load(self._series_path(args), binary=self.binary)

    # -- TrainerCallback events ------------------------------------------------------------------------------------
    def on_init_end(self, args, state, control, **kwargs):
        self._find_trainer()

    def on_train_begin(self, args, state, control, **kwargs):
        self._find_trainer()
        self._start(args)

    def on_save(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        self._find_trainer()
        self._start(args)
        step = state.global_step
        last = state.max_steps > 0 and step >= state.max_steps
        if last or self._last_queued is None or step - self._last_queued >= self.every:
            source = Path(args.output_dir) / f"checkpoint-{step}"
            if source.is_dir():
                _snapshot(source, self._folder(args) / "checkpoints" / f"checkpoint-{step}")
                self._last_queued = step
                self._queued.append(step)
                self._queue.put(step)
        if last:
            self._finish(args, state)
        else:
            self._drain(state)

    def on_step_end(self, args, state, control, **kwargs):
        self._drain(state)

    def on_evaluate(self, args, state, control, **kwargs):
        self._drain(state)

    def on_train_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self._finish(args, state)
