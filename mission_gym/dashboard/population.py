"""A population run's section of its dashboard: the members' curves side by side, a table per stage of the cuts'
scores, the members' table and tree, and the summary cards and line (the members themselves:
:mod:`mission_gym.dashboard.members`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

import numpy as np

from mission_gym.dashboard.charts import Series, line_chart
from mission_gym.dashboard.layout import charts_grid, esc, fmt, fmt_duration, fmt_steps, status_badge, swatch
from mission_gym.dashboard.members import Member, Stage, branch_rows, score_key, stages, target_steps
from mission_gym.dashboard.runs import MEMBERS_DIR, RunData, col, eval_points, wall_seconds

DASHBOARD_FILE = "dashboard.html"


def fate_badge(fate: str) -> str:
    """A member's fate as a badge coloured by its first word (winner, cut, failed, ...)."""
    kind = fate.split()[0] if fate else "unknown"
    return f'<span class="badge {esc(kind)}">{esc(fate or "unknown")}</span>'


def member_href(member: Member, prefix: str = "") -> str | None:
    """The link to a member's dashboard from a page at ``prefix`` (``None`` when it has none yet)."""
    if member.run is None or not (member.run.path / DASHBOARD_FILE).is_file():
        return None
    return f"{prefix}{MEMBERS_DIR}/{quote(member.name)}/{DASHBOARD_FILE}"


def member_link(member: Member, prefix: str = "") -> str:
    href = member_href(member, prefix)
    return f'<a href="{esc(href)}">{esc(member.name)}</a>' if href else esc(member.name)


def _series(member: Member, x: np.ndarray, y: np.ndarray, kind: str = "line") -> Series:
    """A member's curve in its colour, a clone's from where it left its source's."""
    keep = branch_rows(x, member.branch_step)
    return Series(member.label, x[keep], y[keep], kind=kind, color=member.color)


def uses_wins(run: RunData, members: Sequence[Member]) -> bool:
    """Whether the env has wins to rank by (Mission Gym), else the charts and tables show mean return."""
    for stage in run.population.get("cuts") or []:
        if any((s.get("record") or {}).get("win_rate") is not None for s in stage.get("scores") or []):
            return True
    return any(m.run is not None and col(eval_points(m.run), "win_rate") is not None for m in members) or any(
        m.run is not None and col(m.run.progress, "mission/win_rate") is not None for m in members
    )


def member_charts(run: RunData, members: Sequence[Member]) -> list[str]:
    """Every member's curves on shared axes, one colour each, the cuts marked: in-training evaluations, the cut
    scores, and the rollouts' return and win rate."""
    wins = uses_wins(run, members)
    all_stages = stages(run)
    marks = [(s.step, s.mark) for s in all_stages if not s.final and math.isfinite(s.step)]
    target = target_steps(run)
    common: dict[str, Any] = {"x_range": (0.0, target if math.isfinite(target) else None), "marks": marks}
    pct: dict[str, Any] = {"y_range": (0.0, 1.0), "y_fmt": "percent"}
    with_runs = [(m, m.run) for m in members if m.run is not None]

    evals = []
    key = "win_rate" if wins else "mean_return"
    for m, r in with_runs:
        ev = eval_points(r)
        if "timesteps" in ev and key in ev:
            evals.append(_series(m, ev["timesteps"], ev[key], kind="trace"))
    title = "In-training evaluation win rate" if wins else "In-training evaluation return"
    charts = [line_chart(evals, title, chart_id="members_eval", **common, **(pct if wins else {}))]

    scores: dict[str, list[tuple[float, float, float, float]]] = {}
    for stage in all_stages:
        for s in (stage.record or {}).get("scores") or []:
            rec = s.get("record") or {}
            x = rec.get("timesteps", stage.step)
            if wins and rec.get("win_rate") is not None:
                point = (x, rec["win_rate"], rec.get("win_ci_low"), rec.get("win_ci_high"))
            elif not wins and rec.get("mean_return") is not None:
                std = rec.get("std_return") or 0.0
                point = (x, rec["mean_return"], rec["mean_return"] - std, rec["mean_return"] + std)
            else:
                continue
            scores.setdefault(str(s.get("member")), []).append(tuple(math.nan if v is None else float(v) for v in point))
    cut_series = []
    scored = [m for m in members if m.name in scores]
    for k, m in enumerate(scored):
        a = np.array(scores[m.name], dtype=np.float64)
        dodge = (k - (len(scored) - 1) / 2) * min(5.0, 40.0 / len(scored))  # ties at a cut side by side, not hidden
        cut_series.append(
            Series(m.label, a[:, 0], a[:, 1], kind="points", lo=a[:, 2], hi=a[:, 3], color=m.color, offset_px=dodge)
        )
    title = "Scores at the cuts (fresh games, 95% CI)" if wins else "Scores at the cuts (return ± std)"
    charts.append(line_chart(cut_series, title, chart_id="members_cut_scores", **common, **(pct if wins else {})))

    ret = [_series(m, r.timesteps, v) for m, r in with_runs if (v := col(r.progress, "rollout/ep_rew_mean")) is not None]
    charts.append(line_chart(ret, "Rollout return (mean)", chart_id="members_return", **common))
    if wins:
        win = [_series(m, r.timesteps, v) for m, r in with_runs if (v := col(r.progress, "mission/win_rate")) is not None]
        charts.append(line_chart(win, "Rollout win rate", chart_id="members_win_rate", **common, **pct))
    return charts


def _score_cells(rec: Mapping[str, Any], wins: bool) -> str:
    def num(key: str) -> float:
        v = rec.get(key)
        return float(v) if isinstance(v, int | float) else math.nan

    win = num("win_rate")
    ci = (
        f"{fmt(num('win_ci_low'), percent=True)} – {fmt(num('win_ci_high'), percent=True)}"
        if math.isfinite(num("win_ci_low"))
        else "–"
    )
    std = num("std_return")
    ret = fmt(num("mean_return")) + (f" ± {fmt(std)}" if math.isfinite(std) else "")
    outcomes = rec.get("outcomes") if isinstance(rec.get("outcomes"), Mapping) else {}
    mix = " · ".join(f"{k} {v}" for k, v in sorted(outcomes.items(), key=lambda kv: -kv[1]))
    cells = f"<td class='num'>{esc(fmt_steps(num('timesteps')))}</td>"
    if wins:
        cells += f"<td class='num'>{esc(fmt(win, percent=True))}</td><td class='num'>{esc(ci)}</td>"
    cells += (
        f"<td class='num'>{esc(ret)}</td><td class='num'>{esc(fmt(num('mean_ep_length')))}</td>"
        f"<td class='num'>{esc(fmt(num('n_episodes')))}</td><td>{esc(mix)}</td>"
    )
    return cells


def stage_table(stage: Stage, members: Sequence[Member], wins: bool, target: float) -> str:
    """One cut (or the end): every member's score in rank order, and who was kept, cut, cloned or failed."""
    rec = stage.record
    share = f" ({100 * stage.step / target:.0f}% of {fmt_steps(target)})" if math.isfinite(target) and target else ""
    plan = "the winner" if stage.final else stage.mark.split(": ", 1)[1] + (" of the best" if stage.clones else "")
    head = f"<h3>{esc(stage.title)} at {esc(fmt_steps(stage.step))} steps{esc(share)}: {esc(plan)}</h3>"
    if rec is None:
        return head + "<p class='muted'>not reached yet</p>"
    drawn = [str(n) for n in rec.get("drawn") or []]
    if drawn:  # the best member of the others won less than the cut's redraw_below
        head += f"<p class='muted'>{esc(', '.join(drawn))} drawn here: the best of the others won too little</p>"
    by_name = {m.name: m for m in members}
    kept = list(rec.get("kept") or [])
    clones = list(rec.get("clones") or [])
    sources = {m.clone_of for m in members if m.name in clones and m.clone_of}
    best = rec.get("best") or {}
    rows = []
    for rank, s in enumerate(sorted(rec.get("scores") or [], key=score_key, reverse=True), start=1):
        name = str(s.get("member"))
        member = by_name.get(name)
        is_best = stage.final and name == best.get("member") and s.get("model") == best.get("model")
        if stage.final:
            decision = "winner" if is_best else ("runner-up" if name != best.get("member") else "scored lower")
            note = " → the run's best_model.zip" if is_best else ""
        elif name in kept:
            made = [m.name for m in members if m.clone_of == name and m.name in clones] if name in sources else []
            decision, note = ("cloned", f" as {', '.join(made)}") if made else ("kept", "")
        else:
            decision, note = "cut", ""
        who = (swatch(member.color) + member_link(member)) if member else esc(name)
        row_class = ' class="best"' if is_best else ""
        rows.append(
            f"<tr{row_class}><td class='num'>{rank}</td><td>{who}</td>"
            f"<td>{esc(s.get('model', ''))}</td>{_score_cells(s.get('record') or {}, wins)}"
            f"<td>{fate_badge(decision)}{esc(note)}</td></tr>"
        )
    span = 8 if wins else 6  # the score's columns, model to outcomes
    for name in rec.get("failed") or []:
        member = by_name.get(name)
        who = (swatch(member.color) + member_link(member)) if member else esc(name)
        log = f'<a href="{MEMBERS_DIR}/{esc(quote(str(name)))}.log">its log</a>'
        rows.append(
            f"<tr><td></td><td>{who}</td><td colspan='{span}' class='muted'>no score: it failed, see {log}</td>"
            f"<td>{fate_badge('failed')}</td></tr>"
        )
    wins_head = "<th>win rate</th><th>95% CI</th>" if wins else ""
    table = (
        f"<table><tr><th>#</th><th>member</th><th>model scored</th><th>at step</th>{wins_head}<th>return</th>"
        f"<th>episode length</th><th>episodes</th><th>outcomes</th><th>decision</th></tr>" + "".join(rows) + "</table>"
    )
    after = ""
    for name in clones:
        m = by_name.get(name)
        if m is not None and m.clone_of:
            after += (
                f"<p>{swatch(m.color)}{member_link(m)} starts as a copy of {esc(m.clone_of)} at "
                f"{esc(fmt_steps(m.branch_step or stage.step))} steps, with a seed of its own ({esc(m.seed)}).</p>"
            )
    if stage.final and best:
        r = best.get("record") or {}
        win = f"win rate {fmt(r.get('win_rate'), percent=True)}, " if wins and r.get("win_rate") is not None else ""
        after += (
            f"<p><b>Winner:</b> {esc(best.get('member'))}'s {esc(best.get('model'))} at {esc(fmt_steps(r.get('timesteps')))} "
            f"steps ({esc(win)}return {esc(fmt(r.get('mean_return')))} over {esc(fmt(r.get('n_episodes')))} games), "
            "copied into the run directory as best_model.zip with the winner's curves, checkpoints and final model.</p>"
        )
    return head + table + after


def members_table(members: Sequence[Member], wins: bool) -> str:
    """One row per member: where it came from, what became of it, how far and how well it trained."""
    rows = []
    for m in members:
        run = m.run
        ev = eval_points(run) if run is not None else {}
        key = "win_rate" if wins else "mean_return"
        last_eval = math.nan
        if key in ev:
            finite = ev[key][np.isfinite(ev[key])]
            last_eval = float(finite[-1]) if len(finite) else math.nan
        wall = wall_seconds(run)[0] if run is not None else math.nan
        rows.append(
            f"<tr><td>{swatch(m.color)}{member_link(m)}</td><td>{esc(m.origin)}</td><td>{fate_badge(m.fate)}</td>"
            f"<td>{status_badge(run.status) if run is not None else ''}</td>"
            f"<td class='num'>{esc(fmt_steps(m.steps))}</td>"
            f"<td class='num'>{esc(fmt(last_eval, percent=wins))}</td>"
            f"<td class='num'>{esc(fmt(run.last('rollout/ep_rew_mean') if run else None))}</td>"
            f"<td class='num'>{esc(fmt(run.last('time/fps') if run else None))}</td>"
            f"<td class='num'>{esc(fmt_duration(wall))}</td></tr>"
        )
    eval_head = "last eval win rate" if wins else "last eval return"
    return (
        "<table><tr><th>member</th><th>origin</th><th>fate</th><th>status</th><th>timesteps</th>"
        f"<th>{eval_head}</th><th>rollout return</th><th>FPS</th><th>wall time</th></tr>" + "".join(rows) + "</table>"
    )


def population_cards(run: RunData, members: Sequence[Member]) -> list[tuple[str, str, str]]:
    """The population page's cards: members, the winner (the leader at the last cut while there is none) and its
    score, steps, and the run's own wall time."""
    wins = uses_wins(run, members)
    n_clones = sum(1 for m in members if m.clone_of)
    winner = run.metadata.get("winner") if isinstance(run.metadata.get("winner"), Mapping) else {}
    who, model, rec = str(winner.get("member") or "–"), str(winner.get("model") or "not chosen yet"), winner.get("evaluation")
    role = "winner"
    made = [(s, s.record) for s in stages(run) if s.record is not None]
    if not winner and made and (best := made[-1][1].get("best")):
        role = f"leader at {made[-1][0].title.lower()}"
        who, model, rec = str(best.get("member")), str(best.get("model") or ""), best.get("record")
    rec = rec if isinstance(rec, Mapping) else {}
    games = f"{fmt(rec.get('n_episodes'))} games" if rec else ""
    if wins:
        ci = (
            f"95% CI {fmt(rec.get('win_ci_low'), percent=True)} – {fmt(rec.get('win_ci_high'), percent=True)}, " if rec else ""
        )
        score = (f"{role}'s win rate", fmt(rec.get("win_rate"), percent=True), ci + games)
    else:
        score = (f"{role}'s return", fmt(rec.get("mean_return")), games)
    wall, sessions = wall_seconds(run)
    clones = f"{n_clones} clone{'s' if n_clones != 1 else ''}" if n_clones else ""
    return [
        ("members", str(len(members) - n_clones) + (f" + {n_clones}" if n_clones else ""), clones),
        (role, who, model),
        score,
        ("steps per member", fmt_steps(target_steps(run)), ""),
        ("env steps, all members", fmt_steps(sum(m.own_steps for m in members)), "clones' copied steps counted once"),
        ("wall time", fmt_duration(wall), f"{sessions} session{'s' if sessions != 1 else ''}" if sessions else ""),
    ]


def members_section(run: RunData, members: Sequence[Member]) -> str:
    """The population part of a run's page: the members side by side, then each cut's table."""
    wins = uses_wins(run, members)
    target = target_steps(run)
    body = ["<h2>Members side by side</h2>", charts_grid(member_charts(run, members)), members_table(members, wins)]
    body.append("<h2>Cuts: who was kept, cut or cloned, and why</h2>")
    body.append(
        "<p class='muted'>At each cut every member is scored on fresh games of the evaluation seeds (win rate, then "
        "mean return) and ranked; the best carry on.</p>"
    )
    body += [stage_table(s, members, wins, target) for s in stages(run)]
    body.append(starts_table(run.population.get("starts") or []))
    return "".join(body)


def starts_table(found: Sequence[Mapping[str, Any]]) -> str:
    """The starts the run found for its restarts (``population.json``'s ``starts``), one row per recording; empty
    when it found none."""
    if not found:
        return ""
    rows = "".join(
        f"<tr><td>restarts[{esc(str(r.get('block')))}]</td><td>{fmt_steps(r.get('step'))}</td><td>{esc(str(r.get('how')))}"
        f"{'<br><span class=note>' + esc(str(r['situation'])) + '</span>' if r.get('situation') else ''}</td>"
        f"<td>{fmt_steps(r.get('won'))} of {fmt_steps(r.get('games'))}</td><td>{fmt_steps(r.get('states'))}</td>"
        f"<td>{fmt_duration(r.get('seconds'))}</td></tr>"
        for r in found
    )
    return (
        "<h2>Starts the run found</h2><p class='muted'>Won games the run recorded for its restarts to start training "
        "games from (the backward algorithm), played by the lookahead over the scripted greedy fleet at its start or "
        "over its members' policies at a cut. Their time is part of the run's wall time.</p><table><tr><th>block</th>"
        "<th>at step</th><th>played by</th><th>won</th><th>states</th><th>time</th></tr>" + rows + "</table>"
    )


def member_tree(members: Sequence[Member], prefix: str) -> str:
    """The members as a tree (clones under their source), for the runs index's lineage."""
    children: dict[str | None, list[Member]] = {}
    for m in members:
        children.setdefault(m.clone_of if m.clone_of in {x.name for x in members} else None, []).append(m)

    def item(m: Member, seen: frozenset[str]) -> str:
        kids = [c for c in children.get(m.name, []) if c.name not in seen]
        sub = "<ul>" + "".join(item(c, seen | {c.name}) for c in kids) + "</ul>" if kids else ""
        note = f"<span class='note'>{esc(m.origin)}</span>"
        return f"<li>{swatch(m.color)}{member_link(m, prefix)} {fate_badge(m.fate)} {note}{sub}</li>"

    return "<ul>" + "".join(item(m, frozenset({m.name})) for m in children.get(None, [])) + "</ul>"


def summary_line(run: RunData, members: Sequence[Member]) -> str:
    """``population of 3 (+1 clone) · winner m0`` for the runs index."""
    n_clones = sum(1 for m in members if m.clone_of)
    winner = (run.metadata.get("winner") or {}).get("member") if isinstance(run.metadata.get("winner"), Mapping) else None
    text = f"population of {len(members) - n_clones}" + (
        f" (+{n_clones} clone{'s' if n_clones > 1 else ''})" if n_clones else ""
    )
    return text + (f" · winner {winner}" if winner else "")
