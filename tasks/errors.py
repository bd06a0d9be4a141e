"""Errors shared by the task packages."""

from __future__ import annotations


class SettingError(ValueError):
    """A setting from the environment has a value we cannot use; the message
    starts with the variable's name, so one line tells an operator what to fix."""

    def __init__(self, variable: str, problem: str) -> None:
        super().__init__(f"{variable}: {problem}")
        self.variable = variable
