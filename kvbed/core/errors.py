"""One exception type for every user-facing failure.

The CLI turns a KvbedError into a single line on stderr and exit status 2, so any
layer (importer, schema reader, device model) can reject bad input by raising it
with a message that names the file, row or field.
"""


class KvbedError(Exception):
    """Bad input or configuration; the message is shown to the user as one line."""

    exit_code = 2

    def __init__(self, message: str, *, where: str | None = None):
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)


class Interrupted(Exception):
    """The user stopped the command (Ctrl-C); the message says what was kept. The CLI prints it as one
    line, ``kvbed: interrupted: ...``, and exits with status 130 (128 + SIGINT), as shells do."""

    exit_code = 130
