"""Population runs (``population:`` in a preset): several members of one configuration, one seed each, train
side by side as launcher jobs (each its own ``train_ppo`` process on its own cores, on the local pool or on Ray), so
every core of the machine, or of a cluster, works on one result.

At each cut (an env step of the run) every member is scored by a fresh evaluation of ``episodes`` games on the
in-training evaluation seeds and only the best ``keep`` carry on; at the end the survivors' best and final models
are scored the same way and the best of them is the run's ``best_model.zip``. PPO on Mission Gym settles on a
plan early and a seed's evaluation at 30-40% of the run already ranks it among its siblings (docs/experiments.md),
so a cut there spends the cores on the members worth finishing. A cut with ``redraw_below`` whose best member wins
less than that first draws ``redraws`` new members, trains them to the cut and ranks them with the others: a run
ends near where its best lineage stood at the cut, so a seed whose members all missed the plan gets more draws.

A member is an ordinary run under ``<run>/members/`` (``m0`` keeps the run's seed); the winner's files
(checkpoints, curves, TensorBoard events, models) are copied into the run directory, so ``evaluate``,
``record_video`` and the dashboards treat a population run like any other. ``population.json`` records every
score and which members were kept. The launcher's pool pins each member to its cores, admits it by memory,
forwards Ctrl-C or SIGTERM to every member (each saves a checkpoint) and, on Linux, ends the members if this process
dies (``kill -9`` included: the kernel sends each a SIGTERM, so each saves a checkpoint); ``--resume RUN`` carries on
from the members' checkpoints and the cuts already made. This process holds the run's lock, each member its own
directory's.
"""

from __future__ import annotations

import signal
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from mission_gym.config.yaml_io import ConfigError, dump_yaml, read_yaml, validate
from mission_gym.hardware import core_ids
from mission_gym.launch.distill_stage import distill_cut
from mission_gym.launch.jobs import Job
from mission_gym.launch.local import LocalLauncher
from mission_gym.launch.members import (
    adopt_winner,
    check_variant,
    clone_member,
    draw_member,
    grow_envs,
    member_config,
    member_seeds,
    stages,
)
from mission_gym.launch.progress import PopulationProgress
from mission_gym.launch.report import JobRecord
from mission_gym.launch.restart_stage import drawn_restarts, restart_block
from mission_gym.launch.scoring import describe_score, score_members
from mission_gym.launch.starts_stage import due_blocks, find_stage_starts
from mission_gym.launch.together import MemberTask, resolve_learner, train_members_together
from mission_gym.rundir.directory import (
    RunDir,
    check_run_name,
    default_run_name,
    hardware_info,
    resolve_run_dir,
    write_new_run,
)
from mission_gym.rundir.evaluations import EvalRecord
from mission_gym.rundir.files import atomic_write_text, now, read_json, remove_stale_temps, write_json
from mission_gym.rundir.lock import RunLock, lock_run
from mission_gym.settings.schema import TrainConfig
from mission_gym.training import warm
from mission_gym.training.trainer import EXIT_SIGNAL, Trainer

MEMBERS = "members"
STATE = "population.json"
BACKENDS = ("local", "ray")

#: what :class:`PopulationRun` calls after each cut (the end included) is written to ``population.json``: the run
#: directory and the cut's record. ``train_ppo`` refreshes the run's dashboard with it (this layer knows no dashboards).
CutHook = Callable[[Path, dict[str, Any]], None]


@dataclass
class PopulationResult:
    """What a population session did; ``exit_code`` 0, 1 (every member failed), 130 or 143 (stopped)."""

    run_dir: Path
    status: str
    exit_code: int
    wall_s: float
    winner: str | None = None
    winner_model: str | None = None
    record: EvalRecord | None = None
    message: str = ""

    def summary(self) -> str:
        lines = [f"{self.status}: population run {self.run_dir} in {self.wall_s:.1f} s"]
        if self.winner is not None and self.record is not None:
            rec = self.record
            lines.append(
                f"  best: member {self.winner}'s {self.winner_model} at {rec.timesteps:,} steps, "
                f"{rec.n_episodes} evaluation episodes: {rec.win_text(decimals=1)}return {rec.mean_return:.2f}"
            )
        if self.message:
            lines.append(f"  {self.message}")
        return "\n".join(lines)


class PopulationRun:
    """A population run. Build it with :meth:`create` or :meth:`resume`, then :meth:`train`.

    :param config: the run's configuration (``population.size`` > 1)
    :param run: its directory
    :param backend: where the members run: ``local`` (the launcher's pool on this machine) or ``ray``
    :param ray_address: with ``ray``, a cluster to join (None starts a local Ray)
    :param console: where the launcher's events go
    :param on_cut: called after each cut is recorded (see :data:`CutHook`); also settable as ``run.on_cut``
    :param memory_check: admit members by their memory estimates (the pool's, and each member's own check)
    :param lock: the run's lock, held until :meth:`train` ends (or :meth:`close`)
    :param mps: members side by side on a GPU share it through MPS (:mod:`mission_gym.launch.mps`)
    """

    def __init__(
        self,
        config: TrainConfig,
        run: RunDir,
        backend: str = "local",
        ray_address: str | None = None,
        console: Console | None = None,
        on_cut: CutHook | None = None,
        memory_check: bool = True,
        lock: RunLock | None = None,
        mps: bool = True,
    ) -> None:
        if backend not in BACKENDS:
            raise ConfigError(f"--backend {backend!r} is not valid; valid: {', '.join(BACKENDS)}")
        self.config, self.run = config, run
        self.backend, self.ray_address = backend, ray_address
        self.memory_check, self.lock, self.mps = memory_check, lock, mps
        self.console = console or Console(highlight=False)
        self.members_dir = run.path / MEMBERS
        self.state: dict[str, Any] = read_json(run / STATE)
        self.stop_signal: int | None = None
        self.on_cut = on_cut
        self.learner = resolve_learner(config, backend)
        self.progress = PopulationProgress(config, self.state, self.members_dir, say=lambda line: print(line, flush=True))

    # --- construction ---------------------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        config: TrainConfig,
        runs_dir: str | Path = "runs",
        run_name: str | None = None,
        notes: str | None = None,
        command: str | None = None,
        **options: Any,
    ) -> PopulationRun:
        """Check every member's configuration (building one env and model per recipe), then make the run directory.

        :param options: ``backend``, ``ray_address``, ``console``, ``memory_check``, ``mps`` (see the class)
        :raises ConfigError: for bad input (a member that cannot fit in memory included); nothing is created then
        """
        name = check_run_name(run_name or default_run_name(config.env, config.preset))
        run = RunDir(Path(runs_dir) / name)
        if run.path.exists():
            raise ConfigError(f"run directory {str(run.path)!r} already exists; pick another --run-name or --resume it")
        config = config.with_starts_in(run.path / "starts")  # what the run finds for its members' restarts
        if options.get("backend") == "ray":
            from mission_gym.launch.ray_backend import RayUnavailable, import_ray

            try:
                import_ray()
            except RayUnavailable as exc:
                raise ConfigError(str(exc)) from None
        memory_check = options.get("memory_check", True)
        checked = Trainer.check(member_config(config, config.seed), memory_check=memory_check)
        config = config.model_copy(update={"batch_size": checked.config.batch_size, "vec_env": checked.config.vec_env})
        if config.cut_envs_problem():
            raise ConfigError(str(config.cut_envs_problem()))
        seeds = member_seeds(config.seed, config.population.size)
        variants = config.population.variants
        recipes = [check_variant(config, v, i, memory_check) for i, v in enumerate(variants)] if variants else [config]
        starts = run.path / "starts"
        configs = [member_config(recipes[k % len(recipes)], s).with_starts_in(starts, f"m{k}") for k, s in enumerate(seeds)]

        run.create()
        options["lock"] = lock_run(run.path, command)
        device = checked.device
        population = {"size": config.population.size, "seeds": seeds}
        write_new_run(
            run, config, command, notes, lineage={}, metadata={"hardware": hardware_info(device, 0), "population": population}
        )
        (run.path / MEMBERS).mkdir()
        members = [{"name": f"m{k}", "seed": s} for k, s in enumerate(seeds)]
        for m, member in zip(members, configs):
            atomic_write_text(run.path / MEMBERS / f"{m['name']}.yaml", dump_yaml(member.model_dump()))
        write_json(run / STATE, {"members": members, "cuts": []})
        return cls(config, run, **options)

    @classmethod
    def resume(cls, run: str | Path, runs_dir: str | Path = "runs", **options: Any) -> PopulationRun:
        """Continue a population run: members carry on from their checkpoints, cuts already made stand.

        :raises ConfigError: when the directory is not a population run
        """
        run_dir = RunDir(resolve_run_dir(run, runs_dir))
        lock = lock_run(run_dir.path)
        try:
            config = validate(TrainConfig, read_yaml(run_dir / "config.yaml"), str(run_dir / "config.yaml"))
            state = read_json(run_dir / STATE)
            if config.population.size < 2 or not state.get("members"):
                raise ConfigError(f"run {str(run_dir.path)!r} is not a population run (no {STATE})")
            if len(state.get("cuts", [])) >= len(stages(config)) and (run_dir / "final_model.zip").is_file():
                raise ConfigError(f"population run {run_dir.name!r} already finished")
        except BaseException:
            lock.release()
            raise
        remove_stale_temps(run_dir.path)
        return cls(config, run_dir, lock=lock, **options)

    def close(self) -> None:
        """Release the run's lock (:meth:`train` does when it ends)."""
        if self.lock is not None:
            self.lock.release()

    # --- training ---------------------------------------------------------------------------------------------
    def train(self) -> PopulationResult:
        """Train the members through every cut to the end; copy the winner into the run directory."""
        try:
            return self._session()
        finally:
            self.close()

    def _session(self) -> PopulationResult:
        """The session itself (:meth:`train` releases the lock after it, whatever happens)."""
        t0, session_started = time.perf_counter(), now()
        started = read_json(self.run / "metadata.json").get("started") or session_started
        # this session's start, so a dashboard can count it in the run's wall time before the session is listed
        self.run.update_metadata(status="running", started=started, session_started=session_started)
        how = "in this process as one batched learner" if self.learner == "batched" else "as processes side by side"
        print(f"population: members train {how} (population.learner {self.config.population.learner})", flush=True)
        if self.backend == "ray":
            from mission_gym.launch import ray_backend
            from mission_gym.launch.ray_backend import RayUnavailable

            try:
                with ray_backend.session(self.ray_address):  # one Ray instance for every stage
                    result = self._train()
            except RayUnavailable as exc:
                result = PopulationResult(self.run.path, "crashed", 2, 0.0, message=str(exc))
        else:
            result = self._train()
        result.wall_s = time.perf_counter() - t0
        sessions = read_json(self.run / "metadata.json").get("sessions", [])
        this = {"started": session_started, "ended": now(), "status": result.status, "wall_s": round(result.wall_s, 1)}
        self.run.update_metadata(
            status=result.status,
            ended=now(),
            sessions=[*sessions, this],
            result={"winner": result.winner, "message": result.message},
        )
        return result

    def _train(self) -> PopulationResult:
        """Every stage not yet recorded, in order (train, score, redraw, cut, clone, record), then the winner adopted."""
        done_cuts = self.state.setdefault("cuts", [])
        if self.learner == "processes" and self.backend == "local" and warm.applies(self.config.device):
            warm.prepare(compiled=self.config.compile_update)  # its imports overlap with the first recording
        active = [m["name"] for m in self.state["members"]]
        for i, (step, keep) in enumerate(stages(self.config)):
            if i < len(done_cuts):
                active = done_cuts[i]["kept"]
                continue
            final = step >= self.config.timesteps
            cut = None if final else self.config.population.cuts[i]
            # members drawn at this cut by an earlier session (its redraw) train to it with the others
            drawn = [m["name"] for m in self.state["members"] if m.get("drawn_at") == step]
            active = active + [m for m in drawn if m not in active]
            begin = self.config.population.cuts[i - 1].at if i else 0
            if due_blocks(self.config, begin, active, self.run.path / "starts"):  # the starts of the restarts from here
                best = done_cuts[i - 1]["best"] if i else None
                find_stage_starts(self.config, begin, self.run.path, active, best, self.state)
                write_json(self.run / STATE, self.state)
                self.progress.restart_window()
            what = "the end" if final else f"step {step:,} ({100 * step / self.config.timesteps:.0f}%)"
            print(f"population: {', '.join(active)} train to {what}", flush=True)
            scores, failed, stopped = self._train_and_score(active, step, final)
            if stopped is None and cut is not None and cut.redraw_below is not None and not drawn:
                scores, failed, drawn, stopped = self._redraw(cut, step, scores, failed)
            if stopped is not None:
                return stopped
            if not scores:
                return PopulationResult(self.run.path, "crashed", 1, 0.0, message="every member failed; see members/*.log")
            record = self._cut(i, step, keep, scores, failed, drawn, [*done_cuts])
            done_cuts.append(record)
            write_json(self.run / STATE, self.state)  # with the clones' entries in "members"
            self._cut_recorded(done_cuts[-1])
            active = record["kept"]
        best = done_cuts[-1]["best"]
        adopt_winner(self.run, self.members_dir, best, self.config.timesteps)
        rec = EvalRecord(**best["record"])
        return PopulationResult(
            self.run.path, "finished", 0, 0.0, winner=best["member"], winner_model=best["model"], record=rec
        )

    def _redraw(
        self, cut: Any, step: int, scores: list[dict[str, Any]], failed: list[str]
    ) -> tuple[list[dict[str, Any]], list[str], list[str], PopulationResult | None]:
        """A cut whose best member wins less than ``redraw_below`` draws ``redraws`` new members (their games
        started from the best's won games with ``redraw_restarts``), trains them to it and scores them with the
        others: ``(scores, failed, drawn, the session's result if a signal stopped it)``."""
        wins = [s["record"]["win_rate"] for s in scores if s["record"].get("win_rate") is not None]
        if not wins or max(wins) >= cut.redraw_below:  # envs without wins: none
            return scores, failed, [], None
        restarts = None
        if cut.redraw_restarts is not None:
            restarts = restart_block(self.run.path, self.members_dir, scores, step, cut.redraw_restarts)
        drawn = self._draw(cut.redraws, step, restarts)
        print(
            f"population: the best member wins {100 * max(wins):.1f}% < {100 * cut.redraw_below:.0f}% at "
            f"step {step:,}: {', '.join(drawn)} drawn (new seeds) train to it",
            flush=True,
        )
        more, more_failed, stopped = self._train_and_score(drawn, step, False)
        return scores + more, failed + more_failed, drawn, stopped

    def _cut(
        self,
        i: int,
        step: int,
        keep: int,
        scores: list[dict[str, Any]],
        failed: list[str],
        drawn: list[str],
        earlier: list[dict[str, Any]],
    ) -> dict[str, Any]:
        """Stage ``i``'s cut: the members ranked by score (printed), the best ``keep`` kept, the best's clones made
        and a distillation's teachers chosen; its record for ``population.json``."""
        final = step >= self.config.timesteps
        ranked = sorted(scores, key=lambda s: EvalRecord(**s["record"]).score(), reverse=True)
        kept = list(dict.fromkeys(s["member"] for s in ranked))[:keep]
        for s in ranked:
            mark = "*" if (s is ranked[0] if final else s["member"] in kept) else " "
            print(f"  {mark} {s['member']:>4} {s['model']:<28} {describe_score(EvalRecord(**s['record']))}")
        cut = None if final else self.config.population.cuts[i]
        clones = self._clone(kept[0], step, cut.clones if cut is not None else 0)
        if clones:
            print(f"population: {kept[0]} also carries on as {', '.join(clones)} (new seeds)", flush=True)
        record = {"step": step, "scores": scores, "kept": kept + clones, "failed": failed, "best": ranked[0]}
        if drawn:
            record["drawn"] = drawn
        if cut is not None and cut.distill is not None:
            record["teachers"] = distill_cut(self.members_dir, cut, [*earlier, record], kept + clones)
        if cut is not None and cut.n_envs is not None:
            grow_envs(self.members_dir, kept + clones, cut.n_envs)
            print(f"population: {', '.join(kept + clones)} carry on with {cut.n_envs} envs each", flush=True)
        return {**record, "clones": clones} if clones else record

    def _train_and_score(
        self, names: list[str], step: int, final: bool
    ) -> tuple[list[dict[str, Any]], list[str], PopulationResult | None]:
        """Bring ``names`` to ``step`` and score those that got there: their scores, the members that failed, and
        the session's result if a signal stopped it."""
        codes = self._bring_to(names, step)
        if self.stop_signal is not None:
            code = EXIT_SIGNAL.get(signal.Signals(self.stop_signal), EXIT_SIGNAL[signal.SIGTERM])
            msg = "every member saved a checkpoint; --resume continues the population"
            return [], [], PopulationResult(self.run.path, "interrupted", code, 0.0, message=msg)
        failed = [m for m in names if codes.get(m, 1) != 0]
        for m in failed:
            print(f"population: member {m} failed (exit {codes.get(m)}); see {self.members_dir / (m + '.log')}")
        alive = [m for m in names if m not in failed]
        # a fresh evaluation of each member's model at a cut, or of its best and final models at the end
        checkpoints = self.config.population.final_checkpoints
        return (score_members(self.members_dir, alive, self.config, final, checkpoints) if alive else []), failed, None

    def _draw(self, n: int, step: int, restarts: dict[str, Any] | None = None) -> list[str]:
        """``n`` new members with the next seeds and recipes (member ``k`` takes ``variants[k % len(variants)]``, as
        at the start), to be trained from scratch to the cut at ``step`` (with ``restarts``, starting some games from
        the best's won games); recorded in the state before any trains."""
        n_recipes = len(self.config.population.variants) or 1
        block = (lambda recipe: drawn_restarts(restarts, recipe, step)) if restarts else None
        names = []
        for k in range(len(self.state["members"]), len(self.state["members"]) + n):
            seed = member_seeds(self.config.seed, k + 1)[k]
            names.append(draw_member(self.members_dir, k, seed, n_recipes, block))
            self.state["members"].append({"name": names[-1], "seed": seed, "drawn_at": step})
        write_json(self.run / STATE, self.state)
        return names

    def _cut_recorded(self, cut: dict[str, Any]) -> None:
        """Tell :attr:`on_cut`; what it raises is a warning, as a page that cannot be drawn must not end the run."""
        if self.on_cut is None:
            return
        try:
            self.on_cut(self.run.path, cut)
        except Exception as exc:
            warnings.warn(f"population: the on_cut hook failed: {exc!r}", RuntimeWarning, stacklevel=2)

    def _clone(self, best: str, step: int, n: int) -> list[str]:
        """Copy member ``best``, paused at ``step``, ``n`` times as new members with seeds of their own (added to
        the state's ``members``; the caller writes the state); their names."""
        names = []
        for k in range(len(self.state["members"]), len(self.state["members"]) + n):
            name, seed = f"m{k}", member_seeds(self.config.seed, k + 1)[k]
            clone_member(self.members_dir, best, name, seed, step)
            self.state["members"].append({"name": name, "seed": seed, "clone_of": best, "step": step})
            names.append(name)
        return names

    def member_task(self, name: str, step: int) -> MemberTask:
        """The task that brings member ``name`` to ``step`` (a new run, or one carried on); it pauses there unless
        ``step`` is the end."""
        new = not (self.members_dir / name / "config.yaml").is_file()
        return MemberTask(
            name,
            self.members_dir / f"{name}.yaml" if new else None,
            step if step < self.config.timesteps else None,
            self.config.num_threads,
            self.memory_check,
        )

    def _bring_to(self, names: list[str], step: int) -> dict[str, int]:
        """Run each member that has not reached ``step`` until it has, on the launcher's pool; exit codes."""
        codes: dict[str, int] = {}
        todo = []
        for name in names:
            reached = RunDir(self.members_dir / name)
            latest = reached.latest_checkpoint()
            if step < self.config.timesteps:
                done = latest is not None and latest[0] >= step
            else:
                done = (reached / "final_model.zip").is_file()
            if done:
                codes[name] = 0
            else:
                todo.append(name)
        if not todo:
            return codes
        tasks = [self.member_task(name, step) for name in todo]
        if self.learner == "batched":
            more, self.stop_signal = train_members_together(self.members_dir, tasks, on_iteration=self.progress.tick)
            return {**codes, **more}
        records = self._launch([task.job() for task in tasks])
        for r in records:
            codes[r.name] = r.returncode if r.returncode is not None else 1
        return codes

    def _launch(self, jobs: list[Job]) -> list[JobRecord]:
        """Run member jobs side by side: as many at once as the cores hold (``num_threads`` cores each, or an even
        share), each pinned to its own; more processes than cores only share them, and on small machines the
        caches they fight over cost throughput: on 2 cores, 2 members at once trained 8.7k steps/s in all, 7 at once
        5.7k (docs/experiments.md, "Baselines and the search that led here")."""
        cores = core_ids()
        threads = self.config.num_threads or max(1, len(cores) // len(jobs))
        # as many at once as the cores hold; fewer members than that share out all the cores (their envs step on
        # every core they get, their learners keep num_threads)
        slots = min(len(jobs), max(1, len(cores) // threads))
        if self.backend == "ray":
            from mission_gym.launch.ray_backend import RayUnavailable, run_ray

            try:
                records, stop = run_ray(
                    [Job(j.name, j.args, cpus=threads, resume=j.resume) for j in jobs],
                    self.members_dir,
                    self.members_dir,
                    address=self.ray_address,
                    max_parallel=None if self.ray_address else slots,
                    memory_check=self.memory_check,
                    console=self.console,
                    live=False,
                    summary=False,
                )
            except RayUnavailable as exc:
                raise ConfigError(str(exc)) from None
            self.stop_signal = stop
            return records
        launcher = LocalLauncher(
            jobs,
            self.members_dir,
            self.members_dir,
            max_parallel=slots,
            cores=cores,
            memory_check=self.memory_check,
            console=self.console,
            live=False,
            summary=False,
            mps=self.mps,
            on_poll=self.progress.tick,
            warm=warm.applies(self.config.device),
        )
        records = launcher.run()
        self.stop_signal = launcher.stop_signal
        return records


def is_population_run(run: str | Path, runs_dir: str | Path) -> bool:
    """Whether ``--resume RUN`` names a population run (one with ``population.json``)."""
    try:
        return (resolve_run_dir(run, runs_dir) / STATE).is_file()
    except ConfigError:
        return False  # Trainer.resume names what is wrong
