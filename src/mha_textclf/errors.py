"""The exception types for bad input a user can fix.

Library code raises `UserError` with a message that says what was wrong and what to do; the entry points print that
message and exit non-zero instead of showing a traceback from deep inside a library.
"""


class UserError(Exception):
    """Bad input (config, data, files) with an actionable message."""


class RunFolderError(UserError):
    """The run folder is held by a live process, or holds a run with other settings: reported, never recorded in
    that folder (it is not this run's)."""
