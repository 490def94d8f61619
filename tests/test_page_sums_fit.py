"""`PageSums.fits`: a cycle plan skips summing its pages pass by pass where every pass is sure
to fit (issue 38: on short contexts that summing was most of aspire's time). Sound only if
`cover` would never have cut such a plan: checked on real runs, with pages that bind and not."""

from __future__ import annotations

import pytest

import spsim.simulator.segment as segment
from spsim.policies.stretch import PageSums

from conftest import make_trace, run, strip


def test_fits_is_the_pages_at_the_last_pass():
    # ceil((10 + 8 - 0) / 16) + ceil((30 + 8 - 4) / 16) = 2 + 3
    assert PageSums.fits(5, 16, [0, 4], [10, 30], 8)
    assert not PageSums.fits(4, 16, [0, 4], [10, 30], 8)


class _Checked(PageSums):
    """Never skips; asserts that where `fits` said yes, `cover` never cuts."""

    fit: list[bool] = []
    cuts: list[bool] = []

    @staticmethod
    def fits(*a) -> bool:
        _Checked.fit.append(PageSums.fits(*a))
        return False

    def __init__(self, *a):
        super().__init__(*a)
        self.sure = _Checked.fit[-1]

    def cover(self, *a) -> int:
        c = super().cover(*a)
        assert not (self.sure and c != self.NEVER), "fits() said every pass fits, cover cut"
        _Checked.cuts.append(c != self.NEVER)
        return c


@pytest.mark.parametrize("policy,cut", [("aspire", False), ("fixed-k:k=4", True)])
def test_fits_only_where_cover_never_cuts(monkeypatch, policy, cut):
    tr = make_trace(120, seed=3, span=2.0, prompt=(100, 3000), output=(200, 1500))
    for kv_pages in (None, 12000):  # GPU memory (never short), and pages that run out
        _Checked.fit.clear(), _Checked.cuts.clear()
        monkeypatch.setattr(segment, "PageSums", _Checked)
        checked = run(tr, policy=policy, kv_pages=kv_pages)
        monkeypatch.setattr(segment, "PageSums", PageSums)
        skipped = run(tr, policy=policy, kv_pages=kv_pages)
        assert strip(checked.summary) == strip(skipped.summary)
        if kv_pages is None:
            assert _Checked.fit and all(_Checked.fit)
        else:  # short of pages: some plans skip, some cannot (and cover cuts some of fixed-k's)
            assert any(_Checked.fit) and not all(_Checked.fit)
            assert any(_Checked.cuts) == cut
