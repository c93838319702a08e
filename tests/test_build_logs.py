"""Where the operator is in a build container's log (kube/buildlogs.py, pure): each line
taken once across reads, a restarted follower and a read cut at its byte limit; the
operator's use of it runs on envtest (tests/test_operator_builds.py) and on the real node
(tests/test_node_builds.py)."""

from __future__ import annotations

from lockgate.kube.buildlogs import (
    NS,
    SKEW_S,
    Cursor,
    Row,
    marked_done,
    read_options,
    rows,
    stamp_ns,
    take,
)

T0 = 1_765_015_260  # 2025-12-06T10:01:00Z


def _log(*lines: tuple[str, str]) -> str:
    return "".join(f"{stamp} {text}\n" for stamp, text in lines)


def test_the_kubelets_stamps_are_read_to_the_nanosecond() -> None:
    assert stamp_ns("2025-12-06T10:01:00Z") == T0 * NS
    assert stamp_ns("2025-12-06T10:01:00.5Z") == T0 * NS + 500_000_000
    assert stamp_ns("2025-12-06T10:01:00.123456789Z") == T0 * NS + 123_456_789
    assert stamp_ns("2025-12-06T11:01:00.000000001+01:00") == T0 * NS + 1
    assert stamp_ns("STEP") is None and stamp_ns("2025-12-06T10:01:00") is None
    assert rows("2025-12-06T10:01:00Z hello world\nno stamp\n", cut=False) == [
        Row(T0 * NS, "hello world"),
        Row(None, "no stamp"),
    ]


def test_each_line_is_taken_once_over_reads_and_a_restart() -> None:
    first = _log(("2025-12-06T10:01:00.1Z", "STEP 1/2: FROM base"), ("2025-12-06T10:01:00.2Z", "a"))
    lines, cursor = take(Cursor(), rows(first, cut=False))
    assert lines == ["STEP 1/2: FROM base", "a"] and cursor == Cursor(T0 - 1, 2)
    assert read_options(Cursor(), T0 + 10) == {"timestamps": True, "limit_bytes": 4 * 1024 * 1024}
    assert read_options(cursor, T0 + 10)["since_seconds"] == 11 + SKEW_S
    # the next read (the same lines again, and new ones, one in the same second)
    more = first + _log(("2025-12-06T10:01:00.2Z", "b"), ("2025-12-06T10:01:03Z", "STEP 2/2"))
    lines, cursor = take(cursor, rows(more, cut=False))
    assert lines == ["b", "STEP 2/2"] and cursor == Cursor(T0 + 2, 1)
    assert take(cursor, rows(more, cut=False)) == ([], cursor)  # a second look: nothing
    # a restarted operator reads the cursor back from Redis
    again = Cursor.decoded(cursor.encoded())
    assert again == cursor and take(again, rows(more, cut=False)) == ([], cursor)
    # a read for since_seconds starts anywhere before `since`: lines before it are dropped
    window = _log(("2025-12-06T10:01:00.2Z", "b"), ("2025-12-06T10:01:03Z", "STEP 2/2"))
    window += _log(("2025-12-06T10:01:04Z", "c"))
    assert take(cursor, rows(window, cut=False)) == (["c"], Cursor(T0 + 3, 2))
    assert Cursor.decoded(None) == Cursor() == Cursor.decoded("garbage:x")


def test_at_most_so_many_lines_a_read_and_a_cut_line_waits() -> None:
    text = _log(*[(f"2025-12-06T10:01:0{i}Z", f"line {i}") for i in range(5)])
    lines, cursor = take(Cursor(), rows(text, cut=False), most=2)
    assert lines == ["line 0", "line 1"] and cursor == Cursor(T0, 2)
    lines, cursor = take(cursor, rows(text, cut=False), most=2)
    assert lines == ["line 2", "line 3"]
    # a read cut at its byte limit: its unfinished last line is read whole next time
    cut = text[:-4]
    lines, _ = take(cursor, rows(cut, cut=True))
    assert lines == []
    assert take(cursor, rows(text, cut=False))[0] == ["line 4"]


def test_lines_out_of_stamp_order_are_neither_lost_nor_taken_twice() -> None:
    """stdout and stderr are stamped apart: a later line may carry an earlier stamp."""
    text = _log(
        ("2025-12-06T10:01:01.9Z", "out"),
        ("2025-12-06T10:01:02.1Z", "out 2"),
        ("2025-12-06T10:01:01.95Z", "err"),
    )
    lines, cursor = take(Cursor(), rows(text, cut=False), most=2)
    assert lines == ["out", "out 2"] and cursor == Cursor(T0 + 1, 2)
    grown = text + _log(("2025-12-06T10:01:02.5Z", "out 3"))
    lines, cursor = take(cursor, rows(grown, cut=False))
    assert lines == ["err", "out 3"] and cursor == Cursor(T0 + 1, 4)
    assert take(cursor, rows(grown, cut=False)) == ([], cursor)


def test_an_ended_containers_log_is_not_read_again_once_taken_whole() -> None:
    cursor = Cursor(T0, 3)
    done = marked_done(cursor, 2, ended=True, cut=False)
    assert done == Cursor(T0, 3, done=True) and Cursor.decoded(done.encoded()) == done
    assert done.encoded() == f"{T0}:3:end"
    assert marked_done(cursor, 2, ended=False, cut=False) == cursor  # it may write more
    assert marked_done(cursor, 1000, ended=True, cut=False) == cursor  # more may be left
    assert marked_done(cursor, 2, ended=True, cut=True) == cursor  # a line was cut off
