"""Bad paths, bad binaries and bad records: every one ends in QevalError (or ValueError, where the
package refuses an argument itself) with a message naming what was wrong, never in a stray
JSONDecodeError, KeyError, UnicodeDecodeError or OSError, and never in silence. The classes are
those tests/hardening/probe.py's group `python` found (issue 63)."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import qeval


@pytest.fixture(scope="module")
def record(binary, data_dir, tmp_path_factory):
    """A real record: stories260K, 2 windows of 32 tokens, full and int8-coarse."""
    out = tmp_path_factory.mktemp("hostile") / "rec.json"
    done = subprocess.run([binary, "eval", "-q", "--data-dir", str(data_dir),
                           "--model", "models/stories260K/stories260K.bin", "--tokenizer", "models/stories260K/tok512.bin", "--seq-len", "32", "--max-windows", "2",
                           "--no-attention-stats", "--schemes", "full,int8-coarse", "--out", str(out)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 0, done.stderr
    return out


def fake_binary(folder: Path, body: str) -> str:
    path = folder / "fake-qeval"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("body", ["exit 0", "echo hello", "echo '[1, 2]'", "echo '{}'", "echo '{\"rows\": 5}'"])
def test_a_binary_that_is_not_qeval_is_named(record, tmp_path, body):
    # Was: JSONDecodeError, KeyError or TypeError from the package's own code.
    fake = fake_binary(tmp_path, body)
    with pytest.raises(qeval.QevalError) as e:
        qeval.Record.load(record, binary=fake)
    assert fake in e.value.message and "not a qeval binary" in e.value.message


def test_a_binary_killed_or_failing_silently_says_so(record, tmp_path):
    # Was: "qeval exited with status -9: " and nothing else.
    with pytest.raises(qeval.QevalError) as e:
        qeval.Record.load(record, binary=fake_binary(tmp_path, "kill -9 $$"))
    assert "killed by signal 9 (SIGKILL)" in e.value.message and e.value.returncode == -9
    with pytest.raises(qeval.QevalError) as e:
        qeval.run(["compare", str(record)], binary=fake_binary(tmp_path, "exit 1"))
    assert "exited with status 1 without a message" in e.value.message and "fake-qeval" in e.value.message


def test_bytes_that_are_not_utf8_and_files_that_cannot_run_raise_qeval_errors(record, tmp_path):
    # Was: UnicodeDecodeError reading the binary's output; OSError (Exec format error) starting it.
    with pytest.raises(qeval.QevalError) as e:
        qeval.Record.load(record, binary=fake_binary(tmp_path, "printf '\\377\\376{'; exit 2"))
    assert "\ufffd" in e.value.message
    not_elf = tmp_path / "not-elf"
    not_elf.write_bytes(b"\x7fELX garbage")
    not_elf.chmod(0o755)
    with pytest.raises(qeval.QevalError) as e:
        qeval.Record.load(record, binary=not_elf)
    assert "cannot run" in e.value.message and str(not_elf) in e.value.message


def test_a_record_named_like_an_option_is_read_as_a_file(record, binary, tmp_path, monkeypatch):
    # Was: `qeval compare --help --format json` printed the help, and json.loads failed on it;
    # a file named --allow-partial was taken for the option.
    monkeypatch.chdir(tmp_path)
    shutil.copy(record, tmp_path / "--allow-partial")
    assert qeval.Record.load("--allow-partial", binary=binary).kind == "eval"
    with pytest.raises(qeval.QevalError) as e:
        qeval.Record.load("--help", binary=binary)
    assert "--help" in e.value.message


def test_a_record_with_a_byte_order_mark_loads_as_the_binary_reads_it(record, binary, tmp_path):
    # Was: the binary verified it, then json.load raised "Unexpected UTF-8 BOM".
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + record.read_bytes())
    assert qeval.Record.load(bom, binary=binary).raw["schemes"][0]["name"] == "full"


def test_figures_into_a_file_raise_instead_of_returning_nothing(record, binary):
    # Was: every refusal of `qeval plot` returned [] as if gnuplot were missing.
    r = qeval.Record.load(record, binary=binary)
    with pytest.raises(qeval.QevalError) as e:
        r.figures(out=record)
    assert "--out" in e.value.message


def test_compare_takes_one_path_as_one_record_and_refuses_labels_with_commas(record, binary, tmp_path):
    # Was: a string was iterated character by character; "a,b" became two labels.
    pytest.importorskip("pandas")
    assert len(qeval.compare(str(record), binary=binary)) == 1
    with pytest.raises(ValueError, match="comma"):
        qeval.compare([record, record], binary=binary, labels=["a,b", "c"])
    with pytest.raises(qeval.QevalError) as e:
        qeval.compare([tmp_path / "none.json"], binary=binary)
    assert "none.json" in e.value.message


def test_compare_refusals_come_before_pandas(binary, tmp_path, monkeypatch):
    # The binary's verdict on the records does not wait for pandas to be importable.
    monkeypatch.setitem(__import__("sys").modules, "pandas", None)
    with pytest.raises(qeval.QevalError) as e:
        qeval.compare([tmp_path / "none.json"], binary=binary)
    assert "none.json" in e.value.message


def test_evaluate_refuses_an_empty_scheme_list(tmp_path):
    # Was: schemes=[] became "--schemes ''", and the binary ran its default list.
    with pytest.raises(ValueError, match="schemes is empty"):
        qeval.evaluate(tmp_path / "m.bin", schemes=[], binary="/bin/true")
