"""The local-service supervisor that ``hadoop/cluster.py`` and ``ops/airflow_stack.py`` share.

Each tool keeps its services in one state dir (``StateDir``): ``logs/<service>.log`` and
``pids/<service>.pid``, its ports on loopback, each movable by an environment variable
(``EnvPorts``). This module starts a service in its own session with its log file,
recognises it later from the pid file, checks ports, waits for readiness, stops it, and
prints the status table; the tools hold their service lists and what is really theirs
(Hadoop's jars and configs, PostgreSQL and Airflow's configuration and health).

A pid file holds the pid and the kernel start time of that process (field 22 of
``/proc/<pid>/stat``, in clock ticks since boot). A process is the service only while
both match: a pid reused after the service died, or after a reboot, belongs to a stranger,
which ``status`` reports as down and ``down`` never signals. Start times, not command
lines, because Airflow rewrites its command lines (setproctitle).

Stdlib only: the tools must run before the venv has its packages (``down`` and
``status`` under any Python 3).
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import ClassVar

HOST = "127.0.0.1"
EXIT_NOT_ALL_UP = 3  # what `status` exits with when a service is down


class ServiceError(RuntimeError):
    """A service could not be set up, started, reached or stopped; the message says which and why.

    Each tool raises its own subclass (``StateDir.error``, ``EnvPorts.error``).
    """


# --------------------------------------------------------------------------- ports and folders


class EnvPorts:
    """Mixin for a frozen dataclass of loopback ports: defaults, each overridable by env.

    ``variable`` names the override of a field, e.g. ``LAKEPREP_{}_PORT`` gives
    ``LAKEPREP_NN_RPC_PORT`` for the field ``nn_rpc``.
    """

    variable: ClassVar[str]
    error: ClassVar[type[ServiceError]] = ServiceError

    @classmethod
    def from_env(cls):
        defaults = cls()
        values = {}
        for field in fields(cls):
            name = cls.variable.format(field.name.upper())
            value = os.environ.get(name, str(getattr(defaults, field.name)))
            if not value.isdigit() or not 0 < int(value) < 65536:
                raise cls.error(f"{name}={value!r} must be a TCP port number (1-65535)")
            values[field.name] = int(value)
        return cls(**values)

    @classmethod
    def free(cls):
        """Ports the kernel says are free now, for a throwaway instance beside a developer's own."""
        sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in fields(cls)]
        try:
            for probe in sockets:
                probe.bind((HOST, 0))  # all bound at once, so they differ
            return cls(*(probe.getsockname()[1] for probe in sockets))
        finally:
            for probe in sockets:
                probe.close()


@dataclass(frozen=True)
class StateDir:
    """Where one tool keeps its services' logs and pid files, and the rules they run under.

    A tool subclasses it (a frozen dataclass too), naming the error it raises, the
    variables that move its folder and ports (for error messages), and how long a wait lasts.
    """

    state_dir: Path

    error: ClassVar[type[ServiceError]] = ServiceError
    dir_variable: ClassVar[str]
    ports_variable: ClassVar[str]
    wait_timeout_s: ClassVar[float]

    @staticmethod
    def resolve(state_dir: str | os.PathLike[str] | None, variable: str, default: Path) -> Path:
        """The state dir: the argument, else $variable, else the default."""
        return Path(state_dir or os.environ.get(variable) or default).expanduser().resolve()

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def pids_dir(self) -> Path:
        return self.state_dir / "pids"

    def log_file(self, service: str) -> Path:
        return self.logs_dir / f"{service}.log"

    def pid_file(self, service: str) -> Path:
        return self.pids_dir / f"{service}.pid"


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read (it holds secrets), creating its folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(path, 0o600)


# --------------------------------------------------------------------------- processes

# Services started by this Python process: kept so that exited ones are reaped (no zombies
# while a pytest session runs on) and Popen does not warn about children still running.
_children: dict[int, subprocess.Popen[bytes]] = {}


def proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after "(comm)" (state is [0], session [3], starttime [19])."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return stat[stat.rindex(")") + 2 :].split()


def alive(pid: int) -> bool:
    """Whether pid runs (not gone, not a zombie); reaps it first if this process started it."""
    child = _children.get(pid)
    if child is not None and child.poll() is not None:  # exited; poll() reaped it
        del _children[pid]
    fields = proc_stat(pid)
    return fields is not None and fields[0] not in "ZX"


def running_pid(state: StateDir, service: str) -> int | None:
    """The service's pid if that process is still the one we started, else None.

    The pid file's start time must be the process's (the module docstring says why).
    """
    try:
        pid_text, started = state.pid_file(service).read_text().split()
        pid = int(pid_text)
    except (FileNotFoundError, ValueError):
        return None
    fields = proc_stat(pid)
    if fields is None or fields[19] != started or not alive(pid):
        return None
    return pid


def start(
    state: StateDir, service: str, argv: Sequence[str], env: Mapping[str, str], cwd: Path | None = None
) -> int:
    """Launch a service in its own session (it outlives the CLI, and a Ctrl-C in the terminal
    that started it does not reach it), appending to logs/<service>.log; writes its pid file."""
    log_path = state.log_file(service)
    with log_path.open("ab") as log:
        log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting {service}\n".encode())
        log.flush()
        child = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=cwd or state.state_dir,  # stray files (derby.log, spark-warehouse/) land here
            start_new_session=True,
        )
    _children[child.pid] = child
    fields = proc_stat(child.pid)
    if fields is None:
        raise state.error(f"{service} exited at once\n" + tail(log_path))
    state.pid_file(service).write_text(f"{child.pid} {fields[19]}\n")
    return child.pid


def start_unless_running(state: StateDir, service: str, launch: Callable[[], object]) -> bool:
    """Call launch() unless the service's pid file names a live process of ours; True if it did."""
    if running_pid(state, service) is not None:
        return False
    launch()
    return True


def stop(state: StateDir, service: str, grace_s: float) -> bool:
    """SIGTERM the service, SIGKILL after grace_s; only while the pid is still ours.

    Returns whether it was running; the pid file is removed either way.
    """
    pid = running_pid(state, service)
    if pid is not None:
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and running_pid(state, service) == pid:
                time.sleep(0.2)
            if running_pid(state, service) != pid:
                break
        else:
            raise state.error(f"{service} (pid {pid}) survived SIGKILL")
    state.pid_file(service).unlink(missing_ok=True)
    return pid is not None


def session_members(session: int) -> list[int]:
    """Live processes in a session: a service and everything it started that stayed in it."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = proc_stat(int(entry.name))
            if fields is not None and fields[3] == str(session) and fields[0] not in "ZX":
                members.append(int(entry.name))
    return members


def stop_sessions(state: StateDir, services: Sequence[str], grace_s: float) -> list[str]:
    """SIGTERM every service's process group at once, wait for their whole sessions, then
    SIGKILL what is left. Only pids still ours are signalled; returns the services stopped.

    For services whose children outlive a stopped parent unless killed too (Airflow's task
    runners move to their own process group, with their spark-submit JVMs).
    """
    pids = {service: pid for service in services if (pid := running_pid(state, service)) is not None}
    for pid in pids.values():
        try:
            os.killpg(pid, signal.SIGTERM)  # start_new_session: pgid == sid == pid
        except ProcessLookupError:
            pass

    def any_left() -> bool:
        return any(alive(pid) or session_members(pid) for pid in pids.values())

    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any_left():
        time.sleep(0.3)
    for pid in pids.values():
        for member in session_members(pid):
            try:
                os.kill(member, signal.SIGKILL)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any_left():
        time.sleep(0.2)
    left = {service: members for service, pid in pids.items() if (members := session_members(pid))}
    if left:
        raise state.error(f"processes survived SIGKILL: {left}")
    for service in services:
        state.pid_file(service).unlink(missing_ok=True)
    return list(pids)


# --------------------------------------------------------------------------- readiness


def port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        return probe.connect_ex((HOST, port)) == 0


def tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return f"({path} does not exist)"
    return f"--- last {min(lines, len(text))} lines of {path} ---\n" + "\n".join(text[-lines:])


def check_ports_free(state: StateDir, ports: Mapping[str, int]) -> None:
    """Fail before starting anything if the port of a service about to start (name -> port)
    is taken by a stranger (another instance, a daemon whose pid file was deleted)."""
    for service, port in ports.items():
        if port_open(port):
            raise state.error(
                f"{service}: {HOST}:{port} is already in use by a process that {state.pids_dir} "
                f"does not list; stop it, or choose other ports ({state.ports_variable}) "
                f"or another {state.dir_variable}"
            )


def wait(
    state: StateDir,
    what: str,
    probe: Callable[[], str | None],
    watched: Sequence[str],
    log_of: Callable[[], str],
    interval_s: float = 0.5,
) -> None:
    """Poll probe() (None: ready, else why not) until the state's wait timeout; fail at once
    if a watched service dies. Errors carry the tail of the relevant service's log."""
    deadline = time.monotonic() + state.wait_timeout_s
    while True:
        dead = [service for service in watched if running_pid(state, service) is None]
        if dead:
            raise state.error(f"{dead[0]} exited while waiting for {what}\n" + tail(state.log_file(dead[0])))
        try:
            why = probe()
        except (OSError, ValueError, KeyError, IndexError) as err:  # refused, reset, bad JSON
            why = f"{type(err).__name__}: {err}"
        if why is None:
            return
        if time.monotonic() > deadline:
            raise state.error(
                f"timed out after {state.wait_timeout_s:.0f} s waiting for {what}: {why}\n"
                + tail(state.log_file(log_of()))
            )
        time.sleep(interval_s)


# --------------------------------------------------------------------------- CLI


def print_status(report: Mapping[str, Mapping]) -> None:
    """One line per service: name, up/down, pid, endpoint."""
    width = max(map(len, report), default=0) + 1
    for name, row in report.items():
        pid = str(row["pid"]) if row["pid"] else "-"
        print(f"{name:<{width}} {'up' if row['up'] else 'down':<5} pid {pid:<8} {row['endpoint']}")


def status_exit(report: Mapping[str, Mapping]) -> int:
    """Print the status; 0 when every service is up, EXIT_NOT_ALL_UP otherwise."""
    print_status(report)
    return 0 if all(row["up"] for row in report.values()) else EXIT_NOT_ALL_UP


def print_exports(env: Mapping[str, str]) -> None:
    """Shell exports for ``eval "$(python <tool> env)"``."""
    for name, value in env.items():
        print(f"export {name}={shlex.quote(value)}")


def run_command(tool: str, command: str, action: Callable[[], int | None]) -> int:
    """Run one CLI command: its exit code, or 1 with ``<tool> <command>: <why>`` on stderr."""
    try:
        return action() or 0
    except ServiceError as err:
        print(f"{tool} {command}: {err}", file=sys.stderr)
        return 1
