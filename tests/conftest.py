"""Shared by every test module."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's: `-p no:xdist` runs without it
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker more than this process's cores (``--maxprocesses`` caps it): most tests spend part of
    their time waiting for processes they started, which the extra worker fills."""
    from mission_gym.hardware import available_cores

    return available_cores() + 1


@pytest.fixture(autouse=True, scope="session")
def _sb3_logs_in_pytest_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """SB3 models learning without a logger of ours (and the CLIs the tests start) write SB3's default log folders
    under pytest's temporary directory, not one ``SB3-<time>`` folder per model in the system's temp dir."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SB3_LOGDIR", str(tmp_path_factory.mktemp("sb3_logs")))
        yield


@pytest.fixture
def cli_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., tuple[int, str, str]]:
    """A command's ``main`` run in this process, from ``cwd`` (default: the test's tmp dir): its exit status, stdout
    and stderr. For refusals: what a command prints and returns on bad input needs no interpreter and torch of its
    own (each costs 1-3 s); every command keeps a test that starts it as a process."""

    def run(main: Callable[[list[str]], int], args: list[str], cwd: Path | None = None) -> tuple[int, str, str]:
        monkeypatch.chdir(cwd or tmp_path)
        capsys.readouterr()
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's own errors
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = capsys.readouterr()
        return code, out, err

    return run
