"""Dashboards from fabricated run directories: pages, escaping, rate limiting, frames, the CLI, and a
real look in headless Chromium (no console errors, charts not blank)."""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from dashboard_fixtures import make_run
from PIL import Image

from mission_gym.dashboard import refresh_dashboards, write_dashboards, write_eval_frames
from mission_gym.dashboard.charts import Series, fmt_num, line_chart, nice_ticks
from mission_gym.dashboard.frames import frame_sets
from mission_gym.dashboard.pages import parent_run, wilson_interval
from mission_gym.dashboard.runs import load_run, read_csv_columns

EVIL = "<script>alert('x')</script> & \"quotes\""


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    make_run(root, "base", rows=30, notes=EVIL)
    make_run(root, "child<b>", rows=12, parent="base", gpu=False, status="running", seed=1)
    return root


def test_pages_written_self_contained_and_escaped(runs: Path) -> None:
    pages = write_dashboards(runs)
    assert [p.relative_to(runs).as_posix() for p in pages] == ["base/dashboard.html", "child<b>/dashboard.html", "index.html"]
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert "<script" not in text  # nothing executable, and the notes' script tag is escaped
        assert (
            "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; &quot;quotes&quot;" in text or page.parent.name != "base"
        )
        assert "child<b>" not in text  # the run name is escaped wherever it appears
        # no external resources: the only URL is the SVG namespace
        assert set(re.findall(r"https?://[^\"' )]+", text)) <= {"http://www.w3.org/2000/svg"}
    base = (runs / "base" / "dashboard.html").read_text(encoding="utf-8")
    for chart in ("return", "win_rate", "outcomes", "fps", "phases", "util", "memory", "reward/win_bonus"):
        assert f'data-chart="{chart}"' in base
    child = (runs / "child<b>" / "dashboard.html").read_text(encoding="utf-8")
    assert 'data-chart="memory"' in child and "GPU memory" not in child  # only what was logged
    assert 'http-equiv="refresh"' in child and 'http-equiv="refresh"' not in base  # running runs reload themselves
    index = (runs / "index.html").read_text(encoding="utf-8")
    assert "child&lt;b&gt;" in index and "lr-sweep" in index


def test_lineage_parent_from_checkpoint_path(runs: Path) -> None:
    child = load_run(runs / "child<b>")
    assert parent_run(child, ["base", "child<b>"]) == "base"
    assert parent_run(load_run(runs / "base"), ["base", "child<b>"]) is None


def test_refresh_is_rate_limited_and_never_raises(runs: Path, tmp_path: Path) -> None:
    run = runs / "base"
    assert refresh_dashboards(run, min_interval_s=60)
    assert (run / "dashboard.html").exists() and (runs / "index.html").exists()
    assert not refresh_dashboards(run, min_interval_s=60)
    assert refresh_dashboards(run, min_interval_s=60, force=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not refresh_dashboards(tmp_path / "missing" / "run", min_interval_s=0)
    assert any("dashboard refresh" in str(w.message) for w in caught)


def test_a_bare_run_dir_still_gets_a_page(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "fresh"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("preset: quick\n")
    (run / "progress.csv").write_text("time/total_timesteps,rollout/ep_rew_mean\n4096,")  # header and a half-written row
    pages = write_dashboards(tmp_path / "runs", "fresh")
    assert "nothing logged yet" in pages[0].read_text(encoding="utf-8")


def test_csv_read_incrementally_and_after_rewrite(tmp_path: Path) -> None:
    path = tmp_path / "progress.csv"
    path.write_text("a,b\n1,2\n3,\n")
    cols = read_csv_columns(path)
    np.testing.assert_array_equal(cols["a"], [1, 3])
    assert np.isnan(cols["b"][1])
    with open(path, "a") as f:
        f.write("5,6\n7")  # the last row is still being written
    np.testing.assert_array_equal(read_csv_columns(path)["a"], [1, 3, 5])
    with open(path, "a") as f:
        f.write(",8\n")
    np.testing.assert_array_equal(read_csv_columns(path)["b"][2:], [6, 8])
    path.write_text("a,b,c\n9,9,9\n")  # SB3 rewrites the file when a new key appears
    assert list(read_csv_columns(path)) == ["a", "b", "c"]
    path.write_text("a,b,c\n8,8,8\n")  # rewritten in place with the same header
    np.testing.assert_array_equal(read_csv_columns(path)["a"], [8])


def test_write_eval_frames_keeps_newest_sets(tmp_path: Path) -> None:
    frames = [np.full((200, 400, 3), i * 20, dtype=np.uint8) for i in range(10)]
    for step in (100, 200, 300, 400):
        written = write_eval_frames(tmp_path, frames, step, max_frames=4, width=200, keep=2)
        assert len(written) == 4
    sets = frame_sets(tmp_path / "frames")
    assert sorted(sets) == [300, 400]
    first, last = (Image.open(p) for p in (sets[400][0], sets[400][-1]))
    assert first.size == (200, 100)
    assert np.asarray(first).mean() == 0 and np.asarray(last).mean() == 180  # first and last frames kept
    with pytest.raises(ValueError, match="expected"):
        write_eval_frames(tmp_path, [np.zeros((4, 4))], 500)


def test_chart_helpers() -> None:
    assert nice_ticks(0, 1) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert nice_ticks(-48, 197)[0] >= -48 and len(nice_ticks(-48, 197)) >= 3
    assert [fmt_num(v) for v in (2969.4, 81920, 1.5e6, 0.25, 0)] == ["2969", "81.9k", "1.5M", "0.25", "0"]
    lo, hi = wilson_interval(np.array([0.5, 1.0, 0.3]), np.array([20, 20, 0]))
    assert 0.25 < lo[0] < 0.5 < hi[0] < 0.75 and hi[1] == 1.0 and np.isnan(lo[2])
    svg = line_chart([Series("a<b", [1, 2, 3], [1.0, np.nan, 2.0])], "t&t")
    assert "a&lt;b" in svg and "t&amp;t" in svg and svg.count("<circle") == 2  # NaN splits the line into two dots


def test_cli(runs: Path) -> None:
    cmd = [sys.executable, "-m", "mission_gym.scripts.dashboard"]
    ok = subprocess.run([*cmd, "base", "--runs-dir", str(runs)], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "dashboard.html" in ok.stdout and "index.html" in ok.stdout
    bad = subprocess.run([*cmd, "bsae", "--runs-dir", str(runs)], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "did you mean base" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    # a run directory by absolute path, from anywhere and whatever --runs-dir defaults to
    by_path = subprocess.run([*cmd, str((runs / "base").resolve())], capture_output=True, text=True, timeout=120, cwd="/")
    assert by_path.returncode == 0, by_path.stderr
    assert str((runs / "base").resolve() / "dashboard.html") in by_path.stdout
    none = subprocess.run([*cmd, "--runs-dir", str(runs / "nope")], capture_output=True, text=True, timeout=120)
    assert none.returncode == 2 and "does not exist" in none.stderr


def saturated_pixels(img: np.ndarray) -> int:
    """Pixels with clearly coloured (not grey) values: the chart lines, areas and markers."""
    rgb = img[..., :3].astype(int)
    return int(((rgb.max(axis=-1) - rgb.min(axis=-1)) > 60).sum())


def test_dashboard_in_headless_chromium(runs: Path, tmp_path: Path) -> None:
    hc = pytest.importorskip("headless_chromium")
    pytest.importorskip("websockets", reason="the DevTools client needs the websockets package (pip install websockets)")
    if hc.find_browser() is None:
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium)")
    frames = [np.full((120, 120, 3), (37, 99, 235), dtype=np.uint8)] * 3
    write_eval_frames(runs / "base", frames, 122880)
    pages = write_dashboards(runs)
    for page_path in (pages[0], pages[-1]):
        with hc.open_page(page_path.resolve().as_uri()) as page:
            charts = page.evaluate(
                "Array.from(document.querySelectorAll('svg.chart')).map(e => {const r = e.getBoundingClientRect();"
                " return {id: e.dataset.chart, x: r.left + scrollX, y: r.top + scrollY, w: r.width, h: r.height}; })"
            )
            images = page.evaluate("Array.from(document.images).map(i => i.complete && i.naturalWidth > 0)")
            shot = tmp_path / f"{page_path.parent.name}_{page_path.stem}.png"
            png = np.asarray(Image.open(page.screenshot(shot, width=1400) and shot).convert("RGB"))
            assert page.errors() == []
        assert charts, f"no charts on {page_path}"
        assert all(images), "an inlined frame did not decode"
        if page_path.name == "dashboard.html":
            assert len(images) == 3
        for c in charts:
            assert c["w"] > 100 and c["h"] > 80, c
            crop = png[int(c["y"]) : int(c["y"] + c["h"]), int(c["x"]) : int(c["x"] + c["w"])]
            assert crop.std() > 10, f"chart {c['id']} looks blank"
            assert saturated_pixels(crop) > 150, f"chart {c['id']} has no coloured data drawn"
