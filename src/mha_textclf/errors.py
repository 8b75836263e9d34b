"""The one exception type for bad input a user can fix.

Library code raises `UserError` with a message that says what was wrong and what to do; the entry points print that
message and exit non-zero instead of showing a traceback from deep inside a library.
"""


class UserError(Exception):
    """Bad input (config, data, files) with an actionable message."""
