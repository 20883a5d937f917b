"""qeval.evaluate on a tiny GPT-2, and QevalCallback on a tiny GPT-2 trained for a few steps."""
import json
import time
from pathlib import Path

import numpy as np
import pytest

import qeval

SCHEMES = ["int8-coarse", "int8-fine", "w4-zeropoint"]
OPTIONS = dict(token_dtype="uint16", seq_len=64, max_windows=4, threads=1)


def tokens(n, seed):
    """A learnable stream over 512 ids: x[i+1] = 5·x[i] + 3 mod 512, restarted at random."""
    rng = np.random.default_rng(seed)
    out = np.empty(n, dtype=np.uint16)
    x = 0
    for i in range(n):
        x = int(rng.integers(512)) if i % 64 == 0 or rng.random() < 0.05 else (5 * x + 3) % 512
        out[i] = x
    return out


@pytest.fixture(scope="module")
def eval_data(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "tokens.bin"
    tokens(64 * 8, seed=1).tofile(path)
    return path


def table_rows(markdown):
    """The binary's per-scheme table (qeval eval's stdout) as {scheme: [cells]}."""
    rows = {}
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 11 and cells[0] not in ("scheme", "---") and not cells[0].startswith("---"):
            rows[cells[0]] = cells
    return rows


def test_evaluate_equals_the_printed_table(binary, data_dir, eval_data, tmp_path):
    model = data_dir / "fixtures" / "tiny-gpt2-hf"
    record = qeval.evaluate(model, eval_data, schemes=SCHEMES, out=tmp_path / "r.json", **OPTIONS)
    rows = table_rows(record.stdout)
    pen = record.penalties()
    assert list(pen.index) == ["full"] + SCHEMES
    assert set(rows) == set(pen.index)
    for scheme in SCHEMES:
        cells, p = rows[scheme], pen.loc[scheme]
        assert cells[4] == f"{p['dppl']:+.4f}"
        assert cells[5] == f"{p['dppl_pct']:+.2f}"
        assert cells[6] == f"{p['paired_dnll_mean']:+.5f} ± {p['paired_dnll_se']:.5f}"
        assert cells[7] == f"{p['kl_mean']:.5f}"
        assert cells[8] == f"{100 * p['top1_agreement']:.2f}%"
    assert record.statistics().loc["full", "kurtosis_first"] == record.headline()["kurtosis_first"]


def test_evaluate_failure_carries_the_binary_message(binary, eval_data, tmp_path):
    with pytest.raises(qeval.QevalError) as e:
        qeval.evaluate(tmp_path / "no-such-model", eval_data, out=tmp_path / "r.json", **OPTIONS)
    assert e.value.returncode != 0
    assert "no-such-model" in e.value.message


def test_callback_logs_the_records_values(binary, eval_data, tmp_path):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from qeval.integrations.transformers import QevalCallback

    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=512, n_positions=64, n_embd=64, n_layer=2, n_head=4, bos_token_id=0,
                                     eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config)
    stream = torch.from_numpy(tokens(64 * 64, seed=0).astype(np.int64)).view(64, 64)

    class Windows(torch.utils.data.Dataset):
        def __len__(self):
            return stream.shape[0]

        def __getitem__(self, i):
            return {"input_ids": stream[i], "labels": stream[i]}

    class Backend(transformers.TrainerCallback):
        """What a report_to backend receives: every on_log."""

        def __init__(self):
            self.logs = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            self.logs.append((state.global_step, dict(logs or {})))

        def on_step_end(self, args, state, control, **kwargs):
            time.sleep(0.6)  # a slower trainer, so that evaluations can finish while it trains

    # The binary behind a wrapper whose evaluations take at least 1.5 s and say when they ran.
    spans = tmp_path / "spans.txt"
    slow = tmp_path / "slow-qeval"
    slow.write_text(f"""#!/bin/sh
if [ "$1" = eval ] && [ "$3" != "{tmp_path / 'run' / 'qeval-series' / 'checkpoints.list'}" ]; then
  start=$(date +%s.%N); sleep 1.5; "{binary}" "$@"; rc=$?; echo "$start $(date +%s.%N)" >>"{spans}"; exit $rc
fi
exec "{binary}" "$@"
""")
    slow.chmod(0o755)

    class Timed(QevalCallback):
        """QevalCallback, with how long each on_save kept the Trainer waiting."""

        saves = []

        def on_save(self, args, state, control, **kwargs):
            start = time.monotonic()
            super().on_save(args, state, control, **kwargs)
            self.saves.append((state.global_step, time.monotonic() - start))

    backend = Backend()
    callback = Timed(data=eval_data, schemes=SCHEMES, binary=slow, **OPTIONS)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "run"), max_steps=12, save_steps=4, per_device_train_batch_size=8, learning_rate=3e-3,
        logging_steps=1, report_to=[], use_cpu=True, disable_tqdm=True, seed=0, save_safetensors=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Windows(), callbacks=[callback, backend])
    trainer.train()

    assert callback.errors == []
    assert callback.trainer is trainer
    assert sorted(callback.records) == [4, 8, 12]
    # Training never waited for an evaluation (each takes ≥ 1.5 s), except at the last save, where
    # the callback waits for the queue; and the evaluations ran one at a time.
    saves = dict(callback.saves)
    print(f"\non_save kept the Trainer waiting: {saves} s")
    assert saves[4] < 1.0 and saves[8] < 1.0 and saves[12] >= 1.5
    runs = sorted(tuple(map(float, line.split())) for line in spans.read_text().splitlines())
    assert len(runs) == 3 and all(a[1] <= b[0] for a, b in zip(runs, runs[1:]))
    logged = [(step, logs) for step, logs in backend.logs if "qeval/checkpoint_step" in logs]
    assert [int(l["qeval/checkpoint_step"]) for _, l in logged] == [4, 8, 12]
    # Every logged value is its checkpoint's record's value, read back through the binary.
    folder = tmp_path / "run" / "qeval-series"
    series = callback.series_record.series()
    print("\nlogged by QevalCallback (the Trainer step it was logged at: values):")
    for at, logs in logged:
        step = int(logs["qeval/checkpoint_step"])
        print(f"  step {at}: " + json.dumps({k: v for k, v in logs.items() if k.startswith("qeval/")}))
        record = qeval.Record.load(folder / f"step-{step}.json")
        pen, head = record.penalties(), record.headline()
        assert logs["qeval/ppl_full"] == head["ppl_full"] == pen.loc["full", "ppl"]
        for key in ("kurtosis_first", "kurtosis_rest", "max_abs_first", "max_abs_rest", "first_attn_pct", "sink_rate_pct"):
            assert logs[f"qeval/{key}"] == head[key]
        for scheme in SCHEMES:
            assert logs[f"qeval/{scheme}/dppl"] == pen.loc[scheme, "dppl"] == series.loc[(step, scheme), "dppl"]
            assert logs[f"qeval/{scheme}/paired_dnll"] == pen.loc[scheme, "paired_dnll_mean"] == \
                series.loc[(step, scheme), "paired_dnll_mean"]
            assert logs[f"qeval/{scheme}/paired_dnll_se"] == pen.loc[scheme, "paired_dnll_se"]
            assert logs[f"qeval/{scheme}/kl"] == pen.loc[scheme, "kl_mean"]
            assert logs[f"qeval/{scheme}/top1"] == pen.loc[scheme, "top1_agreement"]
        assert series.loc[(step, SCHEMES[0]), "ppl"] == head["ppl_full"]
    # The Trainer's own history holds them (what its report_to backends were sent).
    history = [h for h in trainer.state.log_history if "qeval/checkpoint_step" in h]
    assert len(history) == 3
    # The series record covers the checkpoints evaluated, with the trainer's step and learning rate.
    assert Path(callback.series_record.path) == tmp_path / "run" / "qeval-series.json"
    assert sorted(series.index.get_level_values("step").unique()) == [4, 8, 12]
