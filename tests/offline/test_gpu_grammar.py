"""The sample line's grammar as pairs: lines of the common shape are JSON exactly where the check says so."""

from __future__ import annotations

import json

import pytest

from lens_rl.offline.read.gpu_grammar import json_shaped

GOOD = [
    b'{"t":1765000000000000000,"d":[[60,25,12,250000,1980,45.5,30.25,0.1],null]}\n',
    b'{"t":1,"d":[[0,0,-0,1e5,1E-05,2.5e+3,null,-1.5]]}\n',
    b'{ "t" : 1 , "d" : [ [ 0 , 10 , null , 3 , 4 , 5 , 6 , 7 ] ] }\r\n',
]
BAD = [
    b'{"t":1,"d":[[60, ,12,1,1,1,1,1]]}\n',  # a blank slot
    b'{"t":1,"d":[[ ,25,12,1,1,1,1,1]]}\n',
    b'{"t":1,"d":[[60,25,12,1,1,1,1,]]}\n',
    b'{"t"1:,"d":[[60,25,12,1,1,1,1,1]]}\n',  # digits moved across the structure
    b'{"t":1,"d":[[6,]0,12,1,1,1,1,1]]}\n',
    b'{"t":1,"d":[[.5,25,12,1,1,1,1,1]]}\n',  # numbers JSON does not write
    b'{"t":1,"d":[[5.,25,12,1,1,1,1,1]]}\n',
    b'{"t":1,"d":[[+1,25,12,1,1,1,1,1]]}\n',
    b'{"t":1,"d":[[1-2,25,12,1,1,1,1,1]]}\n',
    b'{"t":1,"d":[[01,25,12,1,1,1,1,1]]}\n',
    b'{"t":1,"d":[[-01,25,12,1,1,1,1,1]]}\n',
    b'{"t":1,"d":[[1e,25,12,1,1,1,1,1]]}\n',
]


@pytest.mark.parametrize("line", GOOD)
def test_json_lines_of_the_shape_pass(line: bytes) -> None:
    """A sample line as JSON writes it (any blanks, exponents, nulls, a null device) passes, alone and twice."""
    json.loads(line)
    assert json_shaped(line) and json_shaped(line * 2)


@pytest.mark.parametrize("line", BAD)
def test_near_misses_that_are_not_json_fail_even_among_good_lines(line: bytes) -> None:
    """A near miss numpy's text parser would read (a blank slot as 0, .5, 01, moved digits) fails, also when
    good lines surround it."""
    with pytest.raises(ValueError):
        json.loads(line)
    assert not json_shaped(line)
    assert not json_shaped(GOOD[0] + line + GOOD[0])
