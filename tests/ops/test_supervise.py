"""ops/supervise.py, the supervisor hadoop/cluster.py and ops/airflow_stack.py share.

Real processes (``sleep``), no services: the pid-file rule and starting/stopping.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "ops") not in sys.path:  # ops/ is a tool folder, as the tools load it
    sys.path.append(str(REPO / "ops"))
import supervise  # noqa: E402


class ToolError(supervise.ServiceError):
    pass


@dataclass(frozen=True)
class ToolState(supervise.StateDir):
    error: ClassVar[type[ToolError]] = ToolError
    dir_variable: ClassVar[str] = "TOOL_DIR"
    ports_variable: ClassVar[str] = "TOOL_*_PORT"
    wait_timeout_s: ClassVar[float] = 5.0


@dataclass(frozen=True)
class ToolPorts(supervise.EnvPorts):
    variable: ClassVar[str] = "TOOL_{}_PORT"
    error: ClassVar[type[ToolError]] = ToolError

    api: int = 18000
    db: int = 18001


@pytest.fixture
def state(tmp_path: Path) -> ToolState:
    state = ToolState(tmp_path)
    state.logs_dir.mkdir()
    state.pids_dir.mkdir()
    return state


@pytest.fixture
def stranger() -> subprocess.Popen:
    """A process the tool did not start."""
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait()


def test_a_started_service_is_recognised_and_stopped(state: ToolState) -> None:
    pid = supervise.start(state, "sleeper", ["sleep", "60"], os.environ)

    assert supervise.running_pid(state, "sleeper") == pid
    assert state.pid_file("sleeper").read_text().split()[0] == str(pid)
    assert "starting sleeper" in state.log_file("sleeper").read_text()
    assert supervise.stop(state, "sleeper", grace_s=5) is True
    assert supervise.running_pid(state, "sleeper") is None
    assert not state.pid_file("sleeper").exists()
    assert supervise.stop(state, "sleeper", grace_s=5) is False


def test_a_pid_file_whose_start_time_differs_names_a_stranger_never_signalled(
    state: ToolState, stranger: subprocess.Popen
) -> None:
    """The pid is live, but not the process the pid file was written for (pid reuse)."""
    started = supervise.proc_stat(stranger.pid)[19]
    state.pid_file("sleeper").write_text(f"{stranger.pid} {int(started) - 1}\n")

    assert supervise.running_pid(state, "sleeper") is None
    assert supervise.stop(state, "sleeper", grace_s=5) is False
    assert supervise.stop_sessions(state, ["sleeper"], grace_s=5) == []
    assert stranger.poll() is None  # still running: not signalled

    # The same pid with its own start time is ours.
    state.pid_file("sleeper").write_text(f"{stranger.pid} {started}\n")
    assert supervise.running_pid(state, "sleeper") == stranger.pid


def test_a_pid_file_without_a_start_time_names_no_process(
    state: ToolState, stranger: subprocess.Popen
) -> None:
    state.pid_file("sleeper").write_text(f"{stranger.pid}\n")

    assert supervise.running_pid(state, "sleeper") is None
    assert supervise.stop(state, "sleeper", grace_s=5) is False
    assert stranger.poll() is None


def test_stop_sessions_ends_what_a_service_started_too(state: ToolState) -> None:
    pid = supervise.start(state, "shell", ["sh", "-c", "sleep 60 & sleep 60; wait"], os.environ)

    assert supervise.stop_sessions(state, ["shell"], grace_s=5) == ["shell"]
    assert supervise.session_members(pid) == []
    assert not state.pid_file("shell").exists()


def test_a_taken_port_fails_naming_the_service_and_the_ways_out(state: ToolState) -> None:
    import socket

    with socket.socket() as server:
        server.bind((supervise.HOST, 0))
        server.listen()
        port = server.getsockname()[1]
        with pytest.raises(
            ToolError, match=rf"api: 127.0.0.1:{port} is already in use .*TOOL_\*_PORT.*TOOL_DIR"
        ):
            supervise.check_ports_free(state, {"api": port})


def test_ports_come_from_the_environment_and_a_bad_one_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOL_DB_PORT", "15000")
    assert ToolPorts.from_env() == ToolPorts(api=18000, db=15000)

    monkeypatch.setenv("TOOL_API_PORT", "70000")
    with pytest.raises(ToolError, match=r"TOOL_API_PORT='70000' must be a TCP port number"):
        ToolPorts.from_env()


def test_a_service_that_dies_ends_the_wait_with_its_log(state: ToolState) -> None:
    supervise.start(state, "crasher", ["sh", "-c", "echo broken config; exit 3"], os.environ)

    with pytest.raises(ToolError, match=r"(?s)crasher exited while waiting for the api.*broken config"):
        supervise.wait(state, "the api", lambda: "not yet", ["crasher"], lambda: "crasher")
