"""A profile's machine against this one (calibration/machine.py): the decode-step anchor of each
measuring run, the profile's reference, the ratio a validation reports."""

from __future__ import annotations

import json

from spsim.calibration import machine
from spsim.calibration.design import anchor_points

POINT = next(a for a in anchor_points(131072, 1 << 20) if a.label == "ar").to_dict()


def _write(path, sessions, points=None):
    """A measurements file: per session a header, its anchors' seconds and `points[i]` made-up
    design-point lines (counted only)."""
    lines = []
    for i, secs in enumerate(sessions):
        lines.append({"spsim_calibration": 1, "session": {"device_name": "GPU", "n": i}})
        lines += [{"id": "x", "point": {}, "ok": False}] * (points[i] if points else 0)
        for s in secs:
            lines.append({"anchor": "k", "label": machine.LABEL, "after": 0, "t_s": 0.0, "point": POINT,
                          "ok": True, "seconds": s})
            lines.append({"anchor": "d", "label": "anchor:draft:static", "after": 0, "t_s": 0.0, "point": POINT,
                          "ok": True, "seconds": 9.0})  # another control: not the decode step's
    # ids must be the points' keys (records.py checks them)
    from spsim.calibration.design import Point

    key = Point.from_dict(POINT).key
    path.write_text("".join(json.dumps({**r, "anchor": key} if "anchor" in r else r) + "\n" for r in lines))


def test_session_anchors_and_the_profiles_reference(tmp_path):
    m = tmp_path / "p.measurements.jsonl"
    _write(m, [[0.01216, 0.01218, 0.01214], [0.01253, 0.01252]])
    s = machine.session_anchors(m)
    assert [round(x["anchor_s"], 6) for x in s] == [0.01216, 0.012525] and [x["session"] for x in s] == [0, 1]
    # the profile's machine (the run of the most points; the last on a tie), from the file beside the
    # profile when the metadata has none
    ref = machine.reference({"metadata": {"measurements": m.name}}, tmp_path / "p.json")
    assert ref == {"anchor_s": s[-1]["anchor_s"], "point": POINT}
    _write(m, [[0.01216, 0.01218, 0.01214], [0.01253, 0.01252]], points=[419, 21])
    assert machine.reference({"metadata": {"measurements": m.name}}, tmp_path / "p.json")["anchor_s"] == 0.01216
    assert machine.reference({"metadata": {"anchor": {"anchor_s": 0.02, "point": POINT}}}, None)["anchor_s"] == 0.02
    assert machine.reference({"metadata": {}}, tmp_path / "p.json") is None
    sp = machine.speed({"anchor_s": 0.01253, "point": POINT}, {"anchor_s": 0.01216, "point": POINT})
    assert sp["slower"] == round(0.01253 / 0.01216 - 1, 4) > 0.03
    # another anchor (a smaller pool halves its contexts): no comparison
    other = dict(POINT, verifies=[[8192, 1]] * 8)
    assert machine.speed({"anchor_s": 0.01, "point": other}, {"anchor_s": 0.01, "point": POINT}) is None


def test_a_profile_records_its_machine_and_warns_of_mixed_ones(tmp_path):
    """The anchor of the run that measured the most points is the profile's; runs 3 % apart draw a
    warning, 0.2 % not."""
    m = tmp_path / "m.jsonl"
    _write(m, [[0.01216], [0.012525]], points=[419, 21])
    info, warn = machine.profile_anchor(m)
    assert info["anchor"]["anchor_s"] == 0.01216 and info["session_anchor_slower"] == [0.0, 0.03]
    assert warn and "+3.0 %" in warn and str(m) in warn
    _write(m, [[0.01250], [0.012525]])
    assert machine.profile_anchor(m)[1] is None
    _write(m, [[0.01250]])
    info, warn = machine.profile_anchor(m)
    assert warn is None and "session_anchor_slower" not in info
    assert machine.profile_anchor(tmp_path / "absent.jsonl") == ({}, None)


def test_a_fit_takes_each_run_on_the_profiles_machine(tmp_path):
    """Runs on another machine have their points' times scaled by the anchor ratio (both the wall
    samples and the device times); the profile's own run and failed points are left alone."""
    from spsim.calibration.design import Point
    from spsim.calibration.records import read_measurements

    m = tmp_path / "m.jsonl"
    _write(m, [[0.010], [0.012]], points=[0, 0])
    p = Point("ar", verifies=((64, 1),) * 2)
    lines = m.read_text().splitlines()
    rec = {"id": p.key, "point": p.to_dict(), "ok": True, "seconds": 0.006, "samples": [0.006], "gpu_s": [0.0059]}
    # three points in run 0, one in run 1: run 0 measured the most, it is the profile's machine
    head1 = next(i for i, x in enumerate(lines) if '"n": 1' in x)
    lines[head1:head1] = [json.dumps(rec)] * 3
    lines.append(json.dumps(rec))
    m.write_text("\n".join(lines) + "\n")
    _, recs = read_measurements(m)
    scaled, f = machine.scale_sessions(m, recs)
    assert f == {1: round(0.010 / 0.012, 5)}
    assert [r.seconds for r in scaled[:3]] == [0.006] * 3
    assert abs(scaled[3].seconds - 0.006 * 0.010 / 0.012) < 1e-12
    assert abs(scaled[3].record["gpu_s"][0] - 0.0059 * 0.010 / 0.012) < 1e-12 and recs[3].seconds == 0.006
