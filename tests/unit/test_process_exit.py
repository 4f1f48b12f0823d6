"""The console script keeps the exit code a command chose when it skips finalization."""

from __future__ import annotations

import subprocess
import sys

import pytest

from orch.process_exit import exit_code


@pytest.mark.parametrize(("raised", "expected"), [(None, 0), (0, 0), (2, 2), (130, 130)])
def test_numeric_exit_codes_are_kept(raised: int | None, expected: int) -> None:
    assert exit_code(SystemExit(raised)) == expected


def test_a_message_exit_prints_it_and_means_failure(capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_code(SystemExit("no such cluster")) == 1
    assert "no such cluster" in capsys.readouterr().err


def test_the_console_script_exits_with_the_commands_code() -> None:
    bad_option = subprocess.run([sys.executable, "-m", "cli.main", "launch", "--bogus"],
                                capture_output=True, text=True, timeout=120)
    assert bad_option.returncode == 2
    assert "--bogus" in bad_option.stderr
    help_ = subprocess.run([sys.executable, "-m", "cli.main", "--help"],
                           capture_output=True, text=True, timeout=120)
    assert help_.returncode == 0
    assert "Usage" in help_.stdout
