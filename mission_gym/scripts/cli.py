"""What every command-line tool shares: an argument parser whose errors are one clear line
(naming the bad value, what is valid and the closest valid name) with exit status 2."""

from __future__ import annotations

import argparse
import atexit
import functools
import os
import re
import select
import sys
from collections.abc import Callable
from typing import NoReturn

from mission_gym.config.loader import suggest

# Every CLI imports this module before torch loads: OpenMP threads that sleep rather than spin while waiting. On
# cores shared with other work, spinning threads stall each other; a PPO update of the fast preset took 5-15 s
# instead of 2.7-3.2 s on the 2-core project machine with another process busy. Set the variable to choose otherwise.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

_INVALID_CHOICE = re.compile(r"invalid choice: '?([^'()]*?)'? \(choose from (.*)\)")


class CliParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` that reports bad input on a single line (no usage dump)."""

    def error(self, message: str) -> NoReturn:
        match = _INVALID_CHOICE.search(message)
        if match:
            valid = [c.strip().strip("'\"") for c in match.group(2).split(",")]
            message = f"{message}{suggest(match.group(1), valid)}"
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def fail(message: str) -> int:
    """Print one ``error:`` line to stderr and return exit status 2."""
    print(f"error: {message}", file=sys.stderr)
    return 2


#: a command whose reader closed the pipe exits as a shell tool killed by SIGPIPE does (128 + 13)
BROKEN_PIPE_STATUS = 141

#: what a command registered to run at the interpreter's exit (once per process)
_AT_EXIT: set[Callable[[], None]] = set()


def command_main(main: Callable[[list[str] | None], int]) -> Callable[[list[str] | None], int]:
    """A command's ``main`` that turns an optional package that is not installed (:class:`~mission_gym.optional.
    MissingExtra`, wherever it is raised) into one ``error:`` line naming the extra to install, exit status 2, and
    a reader that stops reading (``evaluate RUN | head``) into a quiet exit rather than a traceback."""

    @functools.wraps(main)
    def wrapped(argv: list[str] | None = None) -> int:
        from mission_gym.hardware import freeze_heap
        from mission_gym.optional import MissingExtra

        # at the interpreter's exit, not as main returns: a caller in the same process (a test, a notebook) keeps
        # its heap collectable until it exits
        if freeze_heap not in _AT_EXIT:
            _AT_EXIT.add(freeze_heap)
            atexit.register(freeze_heap)
        try:
            return main(argv)
        except MissingExtra as exc:
            return fail(str(exc))
        except BrokenPipeError:
            if not _stdout_reader_gone():  # another pipe broke (a worker's): a real failure
                raise
            # what is still buffered for stdout would fail again at exit; send it nowhere
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return BROKEN_PIPE_STATUS

    return wrapped


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it (``poll`` reports an error on its write end)."""
    if not hasattr(select, "poll"):  # not on Windows: the traceback stays
        return False
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def add_trust_pickle(parser: argparse.ArgumentParser, what: str = "load") -> None:
    """The ``--trust-pickle`` flag of a command that loads an agent to act (:mod:`mission_gym.agents.loading`).

    :param what: what the command does with such a model (``load``, ``convert``)
    """
    parser.add_argument(
        "--trust-pickle",
        action="store_true",
        help=f"{what} a model that exists only as pickles (an SB3 zip and .pkl statistics: a zoo repository, a run "
        "saved before the safe files); unpickling runs whatever code the files name, so only for files you trust",
    )
