"""Dashboards from fabricated run directories: pages, escaping, rate limiting, frames, the CLI, a population run's
members side by side and a launch's jobs side by side, one real tiny population run, and a real look in headless
Chromium (no console errors, charts not blank)."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from dashboard_fixtures import make_launch, make_population, make_run
from PIL import Image

from mission_gym.dashboard import refresh_dashboards, write_dashboards, write_eval_frames
from mission_gym.dashboard.charts import Series, fmt_num, line_chart, nice_ticks
from mission_gym.dashboard.frames import frame_sets
from mission_gym.dashboard.layout import fmt_duration
from mission_gym.dashboard.members import branch_rows, load_members
from mission_gym.dashboard.pages import parent_run
from mission_gym.dashboard.runs import load_run, read_csv_columns, wall_seconds

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
    svg = line_chart([Series("a<b", [1, 2, 3], [1.0, np.nan, 2.0])], "t&t")
    assert "a&lt;b" in svg and "t&amp;t" in svg and svg.count("<circle") == 2  # NaN splits the line into two dots
    # cut labels that would overlap go a line lower; one far enough along goes back to the top line
    marks = [(1.25e6, "cut 1: keep 4"), (2e6, "cut 2: keep 2"), (2.75e6, "cut 3: keep 1"), (8e6, "end")]
    svg = line_chart([Series("m0", [0, 9e6], [0.0, 1.0])], "cuts", marks=marks)
    ys = [float(y) for y in re.findall(r'<text x="[^"]+" y="([^"]+)" class="marklabel"', svg)]
    assert len(ys) == 4 and ys[0] < ys[1] and ys[2] == ys[0] and ys[3] == ys[0]


def test_cli(runs: Path, cli_here: Callable[..., tuple[int, str, str]]) -> None:
    from mission_gym.scripts.dashboard import main

    cmd = [sys.executable, "-m", "mission_gym.scripts.dashboard"]
    ok = subprocess.run([*cmd, "base", "--runs-dir", str(runs)], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "dashboard.html" in ok.stdout and "index.html" in ok.stdout
    code, _, err = cli_here(main, ["bsae", "--runs-dir", str(runs)])
    assert code == 2 and "did you mean base" in err and len(err.strip().splitlines()) == 1
    # a run directory by absolute path, from anywhere and whatever --runs-dir defaults to
    by_path = subprocess.run([*cmd, str((runs / "base").resolve())], capture_output=True, text=True, timeout=120, cwd="/")
    assert by_path.returncode == 0, by_path.stderr
    assert str((runs / "base").resolve() / "dashboard.html") in by_path.stdout
    code, _, err = cli_here(main, ["--runs-dir", str(runs / "nope")])
    assert code == 2 and "does not exist" in err


def saturated_pixels(img: np.ndarray) -> int:
    """Pixels with clearly coloured (not grey) values: the chart lines, areas and markers."""
    rgb = img[..., :3].astype(int)
    return int(((rgb.max(axis=-1) - rgb.min(axis=-1)) > 60).sum())


def browser():
    """The headless Chromium driver, or a skip saying what is missing."""
    hc = pytest.importorskip("headless_chromium")
    pytest.importorskip("websockets", reason="the DevTools client needs the websockets package (pip install websockets)")
    if hc.find_browser() is None:
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium)")
    return hc


def look_at(hc, page_path: Path, tmp_path: Path, skip: tuple[str, ...] = ()) -> tuple[list[dict], list[bool]]:
    """Open a page in Chromium: no console errors, and every chart (but ``skip``) drawn with coloured data.

    :return: the charts' boxes and whether each image decoded
    """
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
    for c in charts:
        assert c["w"] > 100 and c["h"] > 80, c
        if c["id"] in skip:
            continue
        crop = png[int(c["y"]) : int(c["y"] + c["h"]), int(c["x"]) : int(c["x"] + c["w"])]
        assert crop.std() > 10, f"chart {c['id']} looks blank"
        assert saturated_pixels(crop) > 150, f"chart {c['id']} has no coloured data drawn"
    return charts, images


def test_dashboard_in_headless_chromium(runs: Path, tmp_path: Path) -> None:
    hc = browser()
    frames = [np.full((120, 120, 3), (37, 99, 235), dtype=np.uint8)] * 3
    write_eval_frames(runs / "base", frames, 122880)
    pages = write_dashboards(runs)
    for page_path in (pages[0], pages[-1]):
        _, images = look_at(hc, page_path, tmp_path)
        assert all(images), "an inlined frame did not decode"
        if page_path.name == "dashboard.html":
            assert len(images) == 3


def test_population_and_launch_pages_in_headless_chromium(population: Path, tmp_path: Path) -> None:
    hc = browser()
    write_dashboards(population)
    charts, _ = look_at(hc, population / "pop" / "dashboard.html", tmp_path)
    assert {"members_eval", "members_cut_scores", "members_return", "members_win_rate"} <= {c["id"] for c in charts}
    charts, _ = look_at(hc, population / "_launches" / "20250102-100000" / "index.html", tmp_path)
    assert {"jobs_eval", "jobs_return", "jobs_win_rate", "jobs_fps"} == {c["id"] for c in charts}
    look_at(hc, population / "index.html", tmp_path)


# --- a population run's members, a launch's jobs ------------------------------------------------------------------
@pytest.fixture
def population(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    make_population(root, "pop")
    make_run(root, "solo", rows=8)
    make_launch(root)
    return root


def chart(page: str, chart_id: str) -> str:
    """The ``<svg>`` of one chart of a page."""
    m = re.search(rf'<svg class="chart" data-chart="{re.escape(chart_id)}".*?</svg>', page, re.S)
    assert m, f"no chart {chart_id!r}"
    return m.group(0)


def legend(svg: str) -> list[str]:
    return re.findall(r'class="legend">([^<]*)<', svg)


def table_rows(html: str) -> list[tuple[str, str]]:
    """``(member, decision)`` of each row of a cut's table, in rank order."""
    rows = re.findall(r"<tr[^>]*><td class='num'>\d+</td>(.*?)</tr>", html, re.S)
    return [(re.search(r">(m\d+)</a>", r).group(1), re.findall(r'class="badge ([a-z-]+)"', r)[-1]) for r in rows]


def card(page: str, label: str) -> str:
    m = re.search(rf"<div class='k'>{re.escape(html.escape(label))}</div><div class='v'>([^<]*)</div>", page)
    assert m, f"no card {label!r}"
    return m.group(1)


def test_population_page_shows_members_side_by_side_with_cuts_and_wall_time(population: Path) -> None:
    write_dashboards(population)
    page = (population / "pop" / "dashboard.html").read_text(encoding="utf-8")
    ticks = set()
    for chart_id in ("members_eval", "members_cut_scores", "members_return", "members_win_rate"):
        svg = chart(page, chart_id)
        assert legend(svg) == ["m0", "m1", "m2", "m3 (clone of m1)"], chart_id  # every member, one colour each
        assert svg.count('class="mark"') == 1 and "cut 1: keep 2 + 1 clone" in svg  # the cut, marked
        ticks.add(tuple(re.findall(r'class="tick" text-anchor="middle">([^<]*)<', svg)))
    assert ticks == {("0", "25k", "50k", "75k", "100k")}  # shared axes: from 0 over the run's 122,880 steps
    cut = page.split("Cut 1 at 40,960 steps (33% of 122,880): keep 2 + 1 clone of the best")[1].split("</table>")[0]
    assert table_rows(cut) == [("m1", "cloned"), ("m2", "kept"), ("m0", "cut")]  # ranked by their scores
    assert "45.0%" in cut and "30.0% – 60.0%" in cut and "31.5 ± 12.5" in cut and "captured 18" in cut
    assert "m3</a> starts as a copy of m1 at 40,960 steps" in page
    end = page.split("End at 122,880 steps")[1].split("</table>")[0]
    rows = table_rows(end)
    assert rows[0] == ("m1", "winner") and "best_model.zip" in end.split("</tr>")[1] and "114,688" in end
    assert sorted(rows[1:]) == [("m1", "scored"), ("m2", "runner-up"), ("m2", "runner-up"), ("m3", "runner-up"),
                                ("m3", "runner-up")]  # fmt: skip
    # the run's own time: its two sessions (20 + 10 minutes), not the winner's copied time/time_elapsed (41 s)
    assert card(page, "wall time") == "30m 00s" and card(page, "winner") == "m1" and card(page, "members") == "3 + 1"
    assert card(page, "winner's win rate") == "80.0%"
    assert "population of 3 (+1 clone) · winner m1" in page and "Winner m1 · Learning" in page
    assert 'href="members/m3/dashboard.html"' in page
    member = (population / "pop" / "members" / "m3" / "dashboard.html").read_text(encoding="utf-8")
    assert 'member of population <a href="../../dashboard.html">pop</a>' in member
    assert "<script" not in page and set(re.findall(r"https?://[^\"' )]+", page)) <= {"http://www.w3.org/2000/svg"}


def test_clones_branch_from_their_source_at_the_cut(population: Path) -> None:
    members = {m.name: m for m in load_members(load_run(population / "pop"))}
    m3 = members["m3"]
    assert m3.clone_of == "m1" and m3.branch_step == 40960 and m3.fate == "runner-up"
    assert [members[n].fate for n in ("m0", "m1", "m2")] == ["cut at 40,960", "winner", "runner-up"]
    x = m3.run.timesteps
    rows = branch_rows(x, m3.branch_step)
    assert x[rows][0] == 40960 and rows.sum() == len(x) - 9  # from its source's point at the cut on
    src = members["m1"].run
    assert src.progress["rollout/ep_rew_mean"][9] == m3.run.progress["rollout/ep_rew_mean"][9]  # that point is shared
    assert branch_rows(x, None).all()
    # env steps of all members: the clone's copied 40,960 counted once
    assert m3.own_steps == 122880 - 40960 and members["m0"].own_steps == 40960


def test_a_failed_member_is_shown_with_its_log(population: Path) -> None:
    state_file = population / "pop" / "population.json"
    state = json.loads(state_file.read_text())
    cut = state["cuts"][0]
    cut["failed"], cut["scores"] = ["m0"], [s for s in cut["scores"] if s["member"] != "m0"]
    state_file.write_text(json.dumps(state))
    page = write_dashboards(population, "pop")[-2].read_text(encoding="utf-8")
    table = page.split("Cut 1 at")[1].split("</table>")[0]
    assert table_rows(table) == [("m1", "cloned"), ("m2", "kept")]
    assert re.search(r">m0</a></td><td colspan='8'[^>]*>no score: it failed, see <a href=\"members/m0.log\">", table)
    assert "failed at 40,960" in page


def test_index_lists_a_population_once_with_its_members_and_launches(population: Path) -> None:
    write_dashboards(population)
    index = (population / "index.html").read_text(encoding="utf-8")
    table = index.split("<h2>Runs</h2>")[1].split("</table>")[0]
    assert table.count('href="pop/dashboard.html"') == 1 and table.count("<tr class=member>") == 4
    for m in ("m0", "m1", "m2", "m3"):
        assert f'href="pop/members/{m}/dashboard.html"' in table
    pop_row = re.search(r'<tr><td><a href="pop/dashboard.html">.*?</tr>', table, re.S).group(0)
    assert "30m 00s" in pop_row and "population of 3 (+1 clone) · winner m1" in pop_row
    tree = index.split("<h2>Lineage</h2>")[1]
    assert re.search(r">m1</a>.*?<ul><li>.*?>m3</a>", tree, re.S)  # the clone under its source
    assert 'href="_launches/20250102-100000/index.html"' in index and "1 failed" in index


def test_a_member_refresh_refreshes_its_population_page(population: Path) -> None:
    refresh_dashboards(population / "pop" / "members" / "m2", force=True)
    assert (population / "pop" / "members" / "m2" / "dashboard.html").is_file()
    assert "Members side by side" in (population / "pop" / "dashboard.html").read_text(encoding="utf-8")
    assert "population of 3" in (population / "index.html").read_text(encoding="utf-8")


def test_a_running_population_counts_its_session_under_way(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    make_population(root, "live", status="running")
    page = write_dashboards(root, "live")[-2].read_text(encoding="utf-8")
    assert re.fullmatch(r"25m 0\ds", card(page, "wall time"))  # 20 minutes done and 5 under way
    assert 'http-equiv="refresh"' in page and "not reached yet" in page.split("End at 122,880")[1]
    assert card(page, "leader at cut 1") == "m1" and card(page, "leader at cut 1's win rate") == "45.0%"
    assert [m.fate for m in load_members(load_run(root / "live"))] == ["cut at 40,960", "training", "training", "training"]


def test_a_population_before_its_members_start(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "new"
    (run / "members").mkdir(parents=True)
    (run / "config.yaml").write_text("timesteps: 2048\npopulation:\n  size: 2\n  cuts: [{at: 1024, keep: 1}]\n")
    (run / "metadata.json").write_text(json.dumps({"status": "created", "target_timesteps": 2048}))
    (run / "population.json").write_text(json.dumps({"members": [{"name": "m0", "seed": 0}, {"name": "m1", "seed": 5}]}))
    page = write_dashboards(tmp_path / "runs")[-2].read_text(encoding="utf-8")
    assert page.count("not reached yet") == 2 and page.count('class="badge waiting"') == 2
    assert "cut 1: keep 1" not in page and card(page, "wall time") == "–"  # nothing drawn yet, nothing timed yet
    assert "Winner" not in page and card(page, "winner") == "–"


def test_a_population_without_wins_ranks_by_return(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    make_population(root, "gym", mission=False)
    page = write_dashboards(root, "gym")[-2].read_text(encoding="utf-8")
    assert "In-training evaluation return" in chart(page, "members_eval") and 'data-chart="members_win_rate"' not in page
    assert "win rate" not in page.split("Cut 1 at")[1].split("</table>")[0] and card(page, "winner's return") == "150"
    assert 'data-chart="win_rate"' not in page  # the winner's evaluations.csv has an empty win_rate column


def test_wall_time_sums_sessions(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "r", rows=10)
    meta = json.loads((run_dir / "metadata.json").read_text())
    sessions = [
        {"started": "2025-01-02T10:00:00+0000", "ended": "2025-01-02T10:15:00+0000", "end_timesteps": 20480},
        {"started": "2025-01-02T12:00:00+0100", "ended": "2025-01-02T12:05:30+0100", "end_timesteps": 30720},
    ]
    (run_dir / "metadata.json").write_text(json.dumps({**meta, "sessions": sessions}))
    assert wall_seconds(load_run(run_dir)) == (1230.0, 2)  # a resumed run: both sessions, not the last one's SB3 clock
    (run_dir / "metadata.json").write_text(json.dumps({**meta, "status": "running", "sessions": sessions[:1]}))
    # the session under way is not listed yet: its SB3 time/time_elapsed (40960 / 3000 s) is added
    assert wall_seconds(load_run(run_dir)) == pytest.approx((900 + 40960 / 3000, 2))
    assert wall_seconds(load_run(make_run(tmp_path, "old", rows=3))) == pytest.approx((12288 / 3000, 1))
    assert fmt_duration(1230.0) == "20m 30s" and fmt_duration(7500.0) == "2h 05m"


def test_launch_page_shows_jobs_side_by_side(population: Path) -> None:
    pages = write_dashboards(population)
    launch = population / "_launches" / "20250102-100000" / "index.html"
    assert launch in pages and pages[-1] == population / "index.html"
    page = launch.read_text(encoding="utf-8")
    for chart_id in ("jobs_eval", "jobs_return", "jobs_win_rate", "jobs_fps"):
        assert legend(chart(page, chart_id)) == ["ok-s0", "ok-s1"]  # the failed job has no curves
    assert len({tuple(re.findall(r'text-anchor="middle">([^<]*)<', chart(page, c))) for c in ("jobs_eval", "jobs_fps")}) == 1
    rows = {
        m.group(1): m.group(0)
        for m in re.finditer(r"<tr><td><span class=\"swatch\"[^>]*></span>(?:<a [^>]*>)?([\w-]+).*?</tr>", page, re.S)
    }
    assert set(rows) == {"ok-s0", "ok-s1", "bad"}
    assert 'href="../../ok-s0/dashboard.html"' in rows["ok-s0"] and "12m 30s" in rows["ok-s0"] and ">done<" in rows["ok-s0"]
    bad = rows["bad"]
    assert (
        ">failed<" in bad and "<td class='num'>2</td>" in bad and "unknown env NoSuchEnv-v0" in bad and 'href="bad.log"' in bad
    )
    assert card(page, "wall time") == "12m 30s" and card(page, "jobs") == "3"
    assert "<script" not in page and set(re.findall(r"https?://[^\"' )]+", page)) <= {"http://www.w3.org/2000/svg"}


def test_cli_writes_a_launch_page(population: Path) -> None:
    cmd = [sys.executable, "-m", "mission_gym.scripts.dashboard"]
    launch = population / "_launches" / "20250102-100000"
    by_name = subprocess.run([*cmd, launch.name, "--runs-dir", str(population)], capture_output=True, text=True, timeout=120)
    assert by_name.returncode == 0, by_name.stderr
    assert by_name.stdout.split() == [str(launch / "index.html"), str(population / "index.html")]
    (launch / "index.html").unlink()
    by_path = subprocess.run([*cmd, str(launch.resolve())], capture_output=True, text=True, timeout=120, cwd="/")
    assert by_path.returncode == 0, by_path.stderr and (launch / "index.html").is_file()


def test_real_population_run_pages_follow_its_cuts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tiny population (quick preset, 1,024 steps, 3 members, one cut) trained for real: train_ppo refreshes the
    run's page when the cut is made, and at the end it shows every member, the cut and the winner."""
    import mission_gym.dashboard as dashboard
    from mission_gym.scripts.train_ppo import main

    seen: list[tuple[int, str]] = []
    refresh = dashboard.refresh_dashboards

    def spy(run_dir, *args, **kwargs):
        wrote = refresh(run_dir, *args, **kwargs)
        cuts = json.loads((Path(run_dir) / "population.json").read_text())["cuts"]
        seen.append((len(cuts), (Path(run_dir) / "dashboard.html").read_text(encoding="utf-8")))
        return wrote

    monkeypatch.setattr(dashboard, "refresh_dashboards", spy)
    monkeypatch.chdir(tmp_path)
    pop = "population={size: 3, cuts: [{at: 512, keep: 2}], episodes: 4}"
    assert main(["--preset", "quick", "--timesteps", "1024", "--run-name", "p", "--hyperparams", pop, "--no-progress"]) == 0
    run = tmp_path / "runs" / "p"
    state = json.loads((run / "population.json").read_text())
    (cut, end), kept = state["cuts"], state["cuts"][0]["kept"]
    at_cut = [page for n, page in seen if n == 1]  # written by the cut hook, before the survivors trained on
    assert at_cut and "Cut 1 at 512 steps" in at_cut[0] and "not reached yet" in at_cut[0].split("End at 1,024")[1]
    page = (run / "dashboard.html").read_text(encoding="utf-8")
    assert legend(chart(page, "members_cut_scores")) == ["m0", "m1", "m2"]
    for chart_id in ("members_eval", "members_cut_scores"):  # no game ends in 1,024 steps: no rollout curves
        assert chart(page, chart_id).count('class="mark"') == 1 and "cut 1: keep 2" in chart(page, chart_id)
    assert legend(chart(page, "members_eval")) == [m for m in ("m0", "m1", "m2") if m in kept]  # the survivors' at the end
    decisions = dict(table_rows(page.split("Cut 1 at 512 steps")[1].split("</table>")[0]))
    assert decisions == {m: "kept" if m in kept else "cut" for m in ("m0", "m1", "m2")}
    end_rows = table_rows(page.split("End at 1,024 steps")[1].split("</table>")[0])
    assert end_rows[0] == (end["best"]["member"], "winner") and len(end_rows) == len(end["scores"])
    meta = json.loads((run / "metadata.json").read_text())
    assert card(page, "wall time") == fmt_duration(sum(s["wall_s"] for s in meta["sessions"]))
    assert card(page, "winner") == end["best"]["member"]
    index = (tmp_path / "runs" / "index.html").read_text(encoding="utf-8")
    assert index.count("<tr class=member>") == 3 and "population of 3 · winner" in index
    assert all((run / "members" / m / "dashboard.html").is_file() for m in ("m0", "m1", "m2"))
    assert cut["step"] == 512
