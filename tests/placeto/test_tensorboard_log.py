"""placeto.tensorboard_log: TensorBoard scalars written in the calling thread, so that a full disk is an error
naming the directory and a stop signal can neither cut a record in half nor leave a lock held (issue 64)."""

from __future__ import annotations

import errno
import os
import signal
import struct
import time

import pytest
from tensorboardX.proto.event_pb2 import Event
from tensorboardX.record_writer import RecordWriter, masked_crc32c

from placeto.tensorboard_log import ScalarWriter
from simulator.interrupts import Interrupted, stop_on_signals


def read_events(logdir) -> list[Event]:
    """Every event of the one event file in `logdir`, each record's two checksums checked (TFRecord framing)."""
    (path,) = [p for p in logdir.iterdir() if p.name.startswith("events.out.tfevents.")]
    data, events, at = path.read_bytes(), [], 0
    while at < len(data):
        header = data[at:at + 8]
        (n,) = struct.unpack("Q", header)
        assert struct.unpack("I", data[at + 8:at + 12])[0] == masked_crc32c(header)
        body = data[at + 12:at + 12 + n]
        assert struct.unpack("I", data[at + 12 + n:at + 16 + n])[0] == masked_crc32c(body)
        events.append(Event.FromString(body))
        at += 16 + n
    return events


def scalars(events: list[Event]) -> list[tuple[int, dict[str, float]]]:
    return [(e.step, {v.tag: v.simple_value for v in e.summary.value}) for e in events if e.summary.value]


def test_rows_are_events_tensorboard_reads(tmp_path):
    log = ScalarWriter(tmp_path / "tb")
    log.add({"loss": 0.5, "runtime_ms": 31.25, "update": 1}, 1)
    log.add({"loss": float("nan"), "best": float("inf"), "flag": True, "graph": "g", "lr": 1e-3}, 2)  # finite only
    log.add({"loss": float("nan")}, 3)  # nothing finite: no event
    log.close()
    log.close()  # closing twice is harmless
    events = read_events(tmp_path / "tb")
    assert events[0].file_version == "brain.Event:2"
    assert scalars(events) == [(1, {"loss": 0.5, "runtime_ms": 31.25, "update": 1.0}),
                               (2, {"lr": pytest.approx(1e-3)})]


def _full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")  # as a write on a full disk: no file name


@pytest.mark.parametrize("when", ["add", "flush"])
def test_a_full_disk_is_an_error_naming_the_directory_in_the_callers_thread(when, tmp_path, monkeypatch):
    """tensorboardX's SummaryWriter raises it in its own thread, where a run never sees it."""
    log = ScalarWriter(tmp_path / "tb")
    monkeypatch.setattr(RecordWriter, "write" if when == "add" else "flush", _full_disk)
    with pytest.raises(OSError) as caught:
        log.add({"loss": 0.5}, 1)
        log.flush()
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(tmp_path / "tb")
    monkeypatch.undo()
    log.close()  # (left open, the file would close itself when collected, in some later test)


def test_a_signal_during_a_record_is_raised_once_the_record_is_whole(tmp_path, monkeypatch):
    log = ScalarWriter(tmp_path / "tb")
    write = RecordWriter.write

    def signalled_midway(self, data):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.1)  # bytecodes where the handler would run
        write(self, data)

    monkeypatch.setattr(RecordWriter, "write", signalled_midway)
    with pytest.raises(Interrupted), stop_on_signals():
        log.add({"loss": 0.5}, 7)
        time.sleep(5)  # not reached: raised as add returns
    monkeypatch.setattr(RecordWriter, "write", write)
    log.close()
    assert scalars(read_events(tmp_path / "tb")) == [(7, {"loss": 0.5})]
