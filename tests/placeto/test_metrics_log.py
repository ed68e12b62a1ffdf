"""placeto.metrics_log (issue 64, item 3): a run directory's metrics.csv, however damaged, never stops a resume (set
aside with one warning, or its damaged rows dropped with one) nor `placeto plot` with a traceback (one line naming
it); `train` of every method resumes over a damaged log."""

from __future__ import annotations

import csv
import errno

import pytest

from placeto.cli.main import main
from placeto.metrics_log import METRICS, Table, read_table, resumed_rows
from simulator.model.errors import InputError
from simulator.model.generate import layered_dag
from simulator.model.io import save_graph

GOOD = "update,loss,graph\n1,0.5,a\n2,0.25,a\n3,0.125,a\n"
DAMAGES = {"random bytes": bytes(range(256)) * 3, "one latin-1 character": b"\xe9",
           "latin-1 in a row": GOOD.encode() + "4,caf\xe9,a\n".encode("latin-1"),
           "no update column": b"step,loss\n1,2\n",
           "an overlong field": b"update,loss\n1," + b"9" * 200_000 + b"\n"}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_log_is_set_aside_with_one_warning(damage, tmp_path):
    (tmp_path / METRICS).write_bytes(DAMAGES[damage])
    lines: list[str] = []
    assert resumed_rows(tmp_path, lambda update: True, lines.append) is None
    assert len(lines) == 1 and lines[0].startswith(f"placeto: warning: {tmp_path / METRICS}: damaged, "), lines
    assert "set aside as metrics.csv.damaged" in lines[0] and "\n" not in lines[0]
    assert not (tmp_path / METRICS).exists()
    assert (tmp_path / (METRICS + ".damaged")).read_bytes() == DAMAGES[damage]  # kept, not lost
    with pytest.raises(InputError, match=r"metrics.csv\.damaged: "):  # `placeto plot`'s reader: one line, named
        read_table(tmp_path / (METRICS + ".damaged"))


def test_damaged_rows_are_dropped_with_one_warning_and_the_rest_kept(tmp_path):
    (tmp_path / METRICS).write_text(GOOD + "4,0.1\nx,0.1,a\n\n5,0.05,a\n-6,1,a\n7,0.01,a,extra\n4,\0,a\n"
                                    + "\0" * 64)  # the last two: NUL bytes (a crash's zero-filled tail); 7: cut
    # after the checkpoint (update 7 > 4), dropped anyway: not counted
    lines: list[str] = []
    kept = resumed_rows(tmp_path, lambda update: update <= 4, lines.append)
    assert kept == Table(["update", "loss", "graph"], [["1", "0.5", "a"], ["2", "0.25", "a"], ["3", "0.125", "a"]])
    assert lines == [f"placeto: warning: {tmp_path / METRICS}: 5 damaged rows dropped (not 3 fields, a NUL byte, "
                     f"or no whole update number); 3 kept"]
    assert (tmp_path / METRICS).read_text() == GOOD  # rewritten: the kept rows only


def test_a_sound_log_keeps_its_rows_before_the_checkpoint_quietly(tmp_path):
    (tmp_path / METRICS).write_text(GOOD)
    lines: list[str] = []
    assert resumed_rows(tmp_path, lambda update: update < 3, lines.append).rows == [["1", "0.5", "a"],
                                                                                   ["2", "0.25", "a"]]
    assert lines == [] and (tmp_path / METRICS).read_text() == "update,loss,graph\n1,0.5,a\n2,0.25,a\n"
    (tmp_path / METRICS).write_bytes(b"")  # killed before the first row: no log yet, nothing said
    assert resumed_rows(tmp_path, lambda update: True, lines.append) is None and lines == []
    assert resumed_rows(tmp_path / "none", lambda update: True, lines.append) is None and lines == []


def test_a_log_that_cannot_be_read_or_set_aside_is_one_line(tmp_path):
    (tmp_path / METRICS).mkdir()
    (tmp_path / METRICS / "x").write_text("")
    (tmp_path / (METRICS + ".damaged")).mkdir()  # cannot be replaced by a directory of another name
    (tmp_path / (METRICS + ".damaged") / "y").write_text("")
    with pytest.raises(InputError, match=r"metrics.csv: damaged, cannot read: .*; remove it to resume"):
        resumed_rows(tmp_path, lambda update: True, lambda line: None)


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("g") / "g.json"
    save_graph(layered_dag(12, seed=1), path)
    return path


def _logs(method: str, out):
    """Opens `method`'s metrics log in `out` as its resume at update 2 does; returns its closer."""
    if method == "placeto":
        from placeto.methods.placeto.config import tiny
        from placeto.methods.placeto.train import _Logger

        log = _Logger(out, tiny(), 8, 2)
        log.row({"update": 3, "episode": 12, "loss": 0.5}, 12)
        return log.close
    if method == "gdp":
        from placeto.methods.gdp.train import _metrics_writer

        return _metrics_writer(out, 2)[0].close
    from placeto.methods.sequence.rundir import MetricsLog  # rnn and hierarchical

    return MetricsLog(out, 2, 32, 16, progress=False).close


@pytest.mark.parametrize("method", ["placeto", "gdp", "sequence"])
def test_each_methods_log_resumes_over_a_damaged_one(method, tmp_path, capsys):
    (tmp_path / METRICS).write_bytes(b"\xe9")  # the probe's one Latin-1 character (before: a UnicodeDecodeError)
    _logs(method, tmp_path)()
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"placeto: warning: {tmp_path / METRICS}: damaged, not UTF-8 text (byte 0xe9 at offset 0); set "
                   f"aside as metrics.csv.damaged, a new log starts (the checkpoint is intact)"]
    table = read_table(tmp_path / METRICS)  # a new log
    assert table.header[0] == "update" and table.rows == ([["3", "12", "0.5"]] if method == "placeto" else [])
    assert (tmp_path / (METRICS + ".damaged")).read_bytes() == b"\xe9"


@pytest.mark.parametrize("method, episodes", [("rnn", (16, 32))])  # placeto: its _Logger above
def test_train_resumes_over_a_damaged_log(method, episodes, graph_file, tmp_path, capsys):
    """End to end: the rerun resumes, logs its new updates, and plots."""
    run = tmp_path / "run"
    base = ["train", "--graph", str(graph_file), "--devices", "2", "--config", "tiny", "--method", method, "--out",
            str(run)]
    assert main(base + ["--episodes", str(episodes[0])]) == 0
    (run / METRICS).write_bytes(bytes(range(256)))
    capsys.readouterr()
    assert main(base + ["--episodes", str(episodes[1])]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "placeto" in line]
    assert len(err) == 1 and err[0].startswith(f"placeto: warning: {run / METRICS}: damaged, not UTF-8 text"), err
    assert read_table(run / METRICS).rows  # the resumed updates' rows
    assert main(["plot", str(run)]) == 0


def test_plot_of_a_damaged_log_is_one_line(graph_file, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / METRICS).write_bytes(bytes(range(256)))
    assert main(["plot", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"placeto: error: {run / METRICS}: not UTF-8 text (byte 0x80 at offset 128)"]


def _full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")  # as a write on a full disk: no file name


@pytest.mark.parametrize("method", ["placeto", "gdp", "sequence"])
def test_a_full_disk_names_the_log_that_could_not_be_written(method, tmp_path, monkeypatch):
    """ENOSPC while a row is appended: the OSError carries the file's name, so the command's one line says
    "<run>/metrics.csv: No space left on device" (placeto.cli.main prints filename: strerror)."""
    if method == "placeto":
        from placeto.methods.placeto.config import tiny
        from placeto.methods.placeto.train import _Logger

        log = _Logger(tmp_path, tiny(), 0, 0)
        write = lambda: log.row({"update": 1, "loss": 0.5}, 1)  # noqa: E731
    elif method == "gdp":
        from placeto.methods.gdp.train import _metrics_writer

        _, writer = _metrics_writer(tmp_path, 0)
        write = lambda: writer.writerow({"update": 1})  # noqa: E731
    else:
        from placeto.methods.sequence.rundir import MetricsLog

        log = MetricsLog(tmp_path, 0, 32, 0, progress=False)
        write = lambda: log.row({"update": 1}, 1)  # noqa: E731
    monkeypatch.setattr(csv.DictWriter, "writerow", _full_disk)
    with pytest.raises(OSError) as caught:
        write()
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(tmp_path / METRICS)


def test_train_on_a_full_disk_says_which_file(graph_file, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(csv.DictWriter, "writerow", _full_disk)
    run = tmp_path / "run"
    assert main(["train", "--graph", str(graph_file), "--devices", "2", "--config", "tiny", "--out", str(run),
                 "--episodes", "4"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (f"placeto: error: {run / METRICS}: No space left "
                                                                f"on device")


def test_the_progress_bars_show_ms():
    from placeto.methods.placeto.train import bar_postfix
    from placeto.progress import ms

    assert ms(31056.4) == "31.056ms"
    assert bar_postfix("nmt_004", {"final_runtime": 23310.0, "eps_per_s": 2.5}, 16160.0) == {
        "graph": "nmt_004", "rt": "23.310ms", "best": "16.160ms", "eps": "2.50/s"}


def test_an_overlong_field_is_damage_whatever_limit_another_reader_set(tmp_path):
    """csv's field size limit is process-wide (paper_table raises it for its curves): the log's own limit holds."""
    (tmp_path / METRICS).write_bytes(DAMAGES["an overlong field"])
    before = csv.field_size_limit(1 << 30)
    try:
        with pytest.raises(InputError, match="not CSV"):
            read_table(tmp_path / METRICS)
        assert csv.field_size_limit() == 1 << 30  # and left as it was
    finally:
        csv.field_size_limit(before)
