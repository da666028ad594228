"""Each phone's log and its cuts (``PhoneLogs``): what a run's folder gets of a phone's logcat.

The streams are driven by hand, chunk by chunk, as adb's logcat copy delivers them
(no adb, no thread): fast.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from mjfl.device.phones.logcat import PhoneLogs
from mjfl.logs import phone_log_name

PIXEL, GALAXY = "28041FDH2004TQ", "R58R41ABCDE"


def read(folder: Path, serial: str) -> bytes:
    return (folder / phone_log_name(serial)).read_bytes()


def test_a_cut_gets_the_lines_logged_while_it_is_open_and_the_phones_file_every_chunk(tmp_path: Path) -> None:
    logs = PhoneLogs(tmp_path / "lab")
    with logs.stream(PIXEL) as copy:
        copy(b"before\n")
        with logs.cut(tmp_path / "run1"):
            copy(b"during one\n")
        copy(b"between\n")
        with logs.cut(tmp_path / "run2"):
            copy(b"during two\n")
        copy(b"after\n")
    assert read(tmp_path / "run1", PIXEL) == b"during one\n"
    assert read(tmp_path / "run2", PIXEL) == b"during two\n"
    assert read(tmp_path / "lab", PIXEL) == b"before\nduring one\nbetween\nduring two\nafter\n"


def test_a_cut_takes_whole_lines_only(tmp_path: Path) -> None:
    logs = PhoneLogs(tmp_path / "lab")
    with logs.stream(PIXEL) as copy:
        copy(b"begun before")
        with logs.cut(tmp_path / "run"):
            copy(b" the cut\nhalf a li")
            assert read(tmp_path / "run", PIXEL) == b"begun before the cut\n"  # a line ended within the cut
            copy(b"ne\nnot ended when the cut closes")
        copy(b"\n")
    assert read(tmp_path / "run", PIXEL) == b"begun before the cut\nhalf a line\n"


def test_a_reconnects_replay_is_left_out_of_the_cuts_and_the_first_new_line_ends_it(tmp_path: Path) -> None:
    logs = PhoneLogs(tmp_path / "lab")
    with logs.stream(PIXEL) as copy:
        copy(b"a\nb\ncut off by the unplug")
    # Back after a cable pull: adb's logcat starts with the phone's whole buffer again.
    with logs.cut(tmp_path / "run"), logs.stream(PIXEL) as copy:
        copy(b"a\nb")
        copy(b"\nc\na\n")  # "c" is new: from there every line is the run's, "a" again too
    assert read(tmp_path / "run", PIXEL) == b"c\na\n"
    # The line cut off by the unplug is ended in the phone's file, not glued to the new stream's first line.
    assert read(tmp_path / "lab", PIXEL) == b"a\nb\ncut off by the unplug\na\nb\nc\na\n"


def test_a_cut_has_a_file_for_every_phone_known_and_for_one_that_comes_later(tmp_path: Path) -> None:
    logs = PhoneLogs(tmp_path / "lab")
    with logs.stream(PIXEL):
        pass
    with logs.cut(tmp_path / "run"):
        assert read(tmp_path / "run", PIXEL) == b""  # the run's folder names its phones, even silent ones
        with logs.stream(GALAXY) as copy:
            copy(b"galaxy\n")
    assert read(tmp_path / "run", GALAXY) == b"galaxy\n"
    assert read(tmp_path / "run", PIXEL) == b""


@settings(max_examples=50, deadline=None)
@given(data=st.binary(max_size=200), cuts=st.lists(st.integers(0, 200), max_size=8))
def test_however_adb_chunks_the_stream_a_cut_is_its_whole_lines(tmp_path_factory, data: bytes, cuts: list[int]) -> None:
    folder = tmp_path_factory.mktemp("logs")
    logs = PhoneLogs(folder / "lab")
    bounds = [0, *sorted(c % (len(data) + 1) for c in cuts), len(data)]
    with logs.cut(folder / "run"), logs.stream(PIXEL) as copy:
        for start, end in itertools.pairwise(bounds):
            copy(data[start:end])
    whole = data[: data.rfind(b"\n") + 1]
    assert read(folder / "run", PIXEL) == whole
    # The phone's file: every byte, in whole lines (adb's stream ending mid-line ends that line).
    assert read(folder / "lab", PIXEL) == data + (b"\n" if data and not data.endswith(b"\n") else b"")
