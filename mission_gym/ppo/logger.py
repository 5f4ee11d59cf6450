"""SB3's logger writing a run's ``progress.csv`` and ``tb/``, continuing both cleanly when a run resumes.

A resumed run restarts from its newest checkpoint, which is older than the last rows a killed process wrote:
those rows are dropped from ``progress.csv`` and hidden in TensorBoard (``purge_step``), so both step axes
continue from the checkpoint with no reset and no overlap.
"""

from __future__ import annotations

import csv
from pathlib import Path

from stable_baselines3.common.logger import CSVOutputFormat, KVWriter, Logger, TensorBoardOutputFormat

STEP_COLUMN = "time/total_timesteps"


class ResumableCSVOutputFormat(CSVOutputFormat):
    """SB3's CSV writer that keeps an existing file's rows up to ``keep_until`` steps (all rows dropped when None).

    :param filename: the CSV file
    :param keep_until: the step the run resumes from
    """

    def __init__(self, filename: str, keep_until: int | None = None) -> None:
        header: list[str] = []
        kept: list[str] = []
        path = Path(filename)
        if keep_until is not None and path.is_file():
            lines = path.read_text().splitlines(keepends=True)
            if lines:
                header = next(csv.reader([lines[0]]))
                col = header.index(STEP_COLUMN) if STEP_COLUMN in header else None
                for line in lines[1:]:
                    if not line.endswith("\n"):
                        continue  # a row cut short by a kill
                    values = next(csv.reader([line]), [])
                    try:
                        step = float(values[col]) if col is not None else None
                    except (IndexError, ValueError):
                        step = None
                    if step is None or step <= keep_until:
                        kept.append(line)
        super().__init__(filename)
        if header:
            self.file.write(",".join(header) + "\n")
            self.file.writelines(kept)
            self.file.flush()
            self.keys = header


class ResumableTensorBoardOutputFormat(TensorBoardOutputFormat):
    """SB3's TensorBoard writer that hides events at or after ``purge_step`` written by an earlier process."""

    def __init__(self, folder: str, purge_step: int | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=folder, purge_step=purge_step)
        self._is_closed = False


def make_logger(run_path: Path, tensorboard: bool = True, resume_step: int | None = None) -> Logger:
    """The logger of a run: ``progress.csv`` and (unless switched off) TensorBoard events under ``tb/``.

    :param run_path: the run directory
    :param tensorboard: write TensorBoard events
    :param resume_step: the step a resumed run continues from (None for a new run)
    """
    formats: list[KVWriter] = [ResumableCSVOutputFormat(str(run_path / "progress.csv"), resume_step)]
    if tensorboard:
        purge = resume_step + 1 if resume_step is not None else None
        formats.append(ResumableTensorBoardOutputFormat(str(run_path / "tb"), purge))
    return Logger(str(run_path), formats)
