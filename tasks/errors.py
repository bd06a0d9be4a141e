"""Errors shared by the task packages."""

from __future__ import annotations

# One error type for every setting, the job service's and the tasks': a
# bad value is one line, VARIABLE: problem, however it is read.
from pinlater.envsettings import SettingError as SettingError
