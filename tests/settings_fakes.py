"""What the settings test modules share (test_checks, test_cli_command_line): the command-line
check, called in-process as `python -m <app>` calls it, with what it reports captured."""

from mha_textclf import cli


def command_line_problems(*args: str, app: str = "train") -> list[str]:
    """What `python -m <app> <args>` reports before Hydra runs (empty: it would run)."""
    messages = []

    def capture(app_name, found):
        messages.extend(found)

    original = cli.report
    cli.report = capture
    try:
        cli.check_command_line(app, list(args))
    finally:
        cli.report = original
    return messages
