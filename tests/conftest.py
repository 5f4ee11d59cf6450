"""Shared by every test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="session")
def _sb3_logs_in_pytest_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """SB3 models learning without a logger of ours (and the CLIs the tests start) write SB3's default log folders
    under pytest's temporary directory, not one ``SB3-<time>`` folder per model in the system's temp dir."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SB3_LOGDIR", str(tmp_path_factory.mktemp("sb3_logs")))
        yield
