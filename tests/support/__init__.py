"""Fixtures shared across test directories, as pytest plugins that the root
conftest names in ``pytest_plugins`` (never re-exported by import: each
re-export would register the fixture again). Modules here import the task
packages only inside fixtures, so the job service's own tests load nothing
of the apps."""
