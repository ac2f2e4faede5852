"""The verified ranges and the cells that verify them say the same thing.

``rootcause_engine.upstream.versions.VERIFIED`` decides where the plugin runs without a warning;
the compatibility lane (``testbed.compat.LANE``, in ``.ci/run``) and the matrix benchmark
(``MATRIX``) are what verified it. A range widened without a cell, or a cell outside its range,
would make that warning lie.
"""

from __future__ import annotations

import pytest

from rootcause_engine.upstream.versions import VERIFIED, release_of
from testbed import compat

#: The upstream distributions each cell field stands for.
LINES = {
    "torch": ("torch",),
    "flytekit": ("flytekit", "flytekitplugins-kfpytorch"),
    "flyte": ("flyte", "flyteplugins-pytorch"),
}


def _minor(version: str) -> tuple[int, int]:
    release = release_of(version)
    assert release is not None and len(release) >= 2, version
    return release[0], release[1]


def _minors(distribution: str) -> set[tuple[int, int]]:
    """Every minor line of ``distribution``'s verified range."""
    verified = VERIFIED[distribution]
    major = verified.minimum[0]
    assert verified.below[0] == major, "a verified range spans one major"
    return {(major, minor) for minor in range(verified.minimum[1], verified.below[1])}


@pytest.mark.parametrize("field", sorted(LINES))
def test_every_lane_cell_lies_in_the_verified_range(field: str) -> None:
    for cell in compat.LANE:
        for distribution in LINES[field]:
            assert getattr(cell, field) in VERIFIED[distribution], (cell, distribution)


@pytest.mark.parametrize("field", sorted(LINES))
def test_the_lane_runs_the_oldest_and_the_newest_verified_line(field: str) -> None:
    for distribution in LINES[field]:
        minors = _minors(distribution)
        lane = {_minor(getattr(cell, field)) for cell in compat.LANE}
        assert min(minors) in lane and max(minors) in lane, (distribution, sorted(minors), sorted(lane))
        assert len(lane & minors) >= 3 or len(minors) < 3, "the lane runs a middle line too"


@pytest.mark.parametrize("field", sorted(LINES))
def test_the_matrix_measures_every_verified_line(field: str) -> None:
    for distribution in LINES[field]:
        measured = {_minor(getattr(cell, field)) for cell in compat.MATRIX}
        assert _minors(distribution) <= measured, (distribution, sorted(_minors(distribution) - measured))
