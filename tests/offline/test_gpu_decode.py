"""GPU sample lines decoded on the checked path: a run of the common shape read at once gives what each line
decoded alone gives, and a line of another shape or out of range is told apart."""

from __future__ import annotations

import json

import numpy as np

from lens_rl.offline.read.gpu_decode import COUNTERS, SKELETON_DROP, bulk, one_line, plausible_rows, skeleton

_T0 = 1_700_000_000_000_000_000


def _line(t: int, devices: list[list[object] | None]) -> bytes:
    return json.dumps({"t": t, "d": devices}, separators=(",", ":")).encode() + b"\n"


def test_a_run_read_at_once_gives_what_each_line_decoded_alone_gives() -> None:
    """Lines of the common shape (integers, floats, nulls) read by :func:`bulk` give the times and values
    :func:`one_line` gives each of them."""
    rows = [
        [[i % 101, None, 2**33 + i, 250.5, 1980, 0.25, None, None], [7, 3, 2**40, 1, 2, 0, 0, 0]] for i in range(50)
    ]
    data = b"".join(_line(_T0 + i * 10**9, row) for i, row in enumerate(rows))
    assert data.translate(None, SKELETON_DROP) == skeleton(2) * 50
    parsed = bulk(data, 50, 2)
    assert parsed is not None
    t, v = parsed
    assert t.dtype == np.int64 and v.shape == (50, 2, COUNTERS) and v.dtype == np.float32
    for i, raw in enumerate(data.split(b"\n")[:-1]):
        one = one_line(raw, 2)
        assert one is not None and one[0] == t[i]
        want = np.array(one[1], np.float32).reshape(2, COUNTERS)
        assert np.array_equal(v[i], want, equal_nan=True)


def test_a_line_of_another_shape_or_out_of_range_is_told_apart() -> None:
    """A device entry ``null`` decodes alone as nans; a line of another device count, not JSON, or with a time
    past int64 is no line; :func:`plausible_rows` refuses a percentage over 100 and a negative value."""
    one = one_line(_line(_T0, [None, [1] * COUNTERS])[:-1], 2)
    assert one is not None and all(np.isnan(one[1][:COUNTERS])) and one[1][COUNTERS:] == [1.0] * COUNTERS
    assert one_line(_line(_T0, [[1] * COUNTERS])[:-1], 2) is None
    assert one_line(b'{"t":1,"d":[', 1) is None
    assert one_line(_line(2**63, [[1] * COUNTERS])[:-1], 1) is None
    t = np.array([_T0, _T0, _T0], np.int64)
    v = np.zeros((3, 1, COUNTERS), np.float32)
    v[1, 0, 0] = 101  # util, a percentage
    v[2, 0, 2] = -1  # memory used
    assert plausible_rows(t, v).tolist() == [True, False, False]
