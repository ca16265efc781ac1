"""The real Airflow services for this project, on PostgreSQL, on loopback: for users and tests.

    python ops/airflow_stack.py up       # initdb once, start PostgreSQL, migrate, start Airflow, wait
    eval "$(python ops/airflow_stack.py env)"   # then `airflow dags list` etc. talk to the stack
    python ops/airflow_stack.py status   # exit 0 when every service is up, 3 otherwise
    python ops/airflow_stack.py down     # SIGTERM each service's session, SIGKILL stragglers, pg_ctl stop

What runs, all bound to 127.0.0.1:

- PostgreSQL from Debian's ``/usr/lib/postgresql/<version>/bin`` (``initdb``, ``pg_ctl``),
  its cluster in ``<state>/postgres``. PostgreSQL refuses to run as root, so under root it
  runs as the ``postgres`` system user (``runuser``), the data folder chowned to it. The
  Unix socket lives in a folder only that user can open (trust there, for the setup
  only); Airflow connects over TCP with a generated password (scram-sha-256).
- ``airflow api-server``, ``scheduler`` (LocalExecutor, parallelism 4), ``dag-processor``
  and ``triggerer``, with ``AIRFLOW_HOME=<state>/airflow``, this checkout's ``dags/`` and
  ``plugins/``, and SimpleAuthManager with one real user and a password file (a login
  like production, not ``all_admins``).

Ports (defaults below; LAKEPREP_STACK_POSTGRES_PORT, LAKEPREP_STACK_API_PORT,
LAKEPREP_STACK_WORKER_LOG_PORT, LAKEPREP_STACK_TRIGGER_LOG_PORT move them): PostgreSQL
15432, API and UI 18080, worker and trigger log servers 18793 and 18794. The log servers
are not started: Airflow's ``serve-logs`` binds every interface and has no host option
(``airflow/utils/serve_logs/core.py``), and on one machine the api-server reads the task
log files directly, so scheduler and triggerer run with ``--skip-serve-logs``.

The lake root is ``--lake``, else ``$AIRFLOW_VAR_LAKEPREP_LAKE_ROOT``, else
``file://<repo>/.lake``; the specs ``$LAKEPREP_PIPELINES_DIR``, else ``<repo>/pipelines``;
the Spark connection ``$AIRFLOW_CONN_SPARK_DEFAULT``, else
``local[2]``. All three are fixed at ``up`` while the stack runs.

Everything lives in one state dir, ``<repo>/.stack`` unless ``LAKEPREP_STACK_DIR`` says
otherwise: ``stack.json`` (ports, lake root, generated secrets and the login; mode 0600),
``postgres/`` (the database cluster), ``airflow/`` (AIRFLOW_HOME: ``airflow.cfg``,
``passwords.json``, task logs under ``logs/``), ``logs/<service>.log``, ``pids/``.
Every wait gives up after LAKEPREP_STACK_TIMEOUT seconds (180) and reports the tail of
the failing service's log.

Importable; stdlib-only except the REST client ``AirflowClient`` (``requests``), so
``down`` and ``status`` run under any Python 3. ``up()``, ``down()``, ``status()``,
``shell_env()`` and ``AirflowClient`` are what pytest fixtures and tests use. Starting,
recognising (pid files with start times), waiting for and stopping the services is
``ops/supervise.py``, shared with ``hadoop/cluster.py``; this file holds the service list
and what is PostgreSQL's and Airflow's.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import pwd
import secrets
import shlex
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

OPS_DIR = Path(__file__).resolve().parent
if str(OPS_DIR) not in sys.path:  # loaded by path (tests) rather than run as a script
    sys.path.append(str(OPS_DIR))
import supervise  # noqa: E402
from supervise import HOST, tail  # noqa: E402

if TYPE_CHECKING:
    import requests

REPO = OPS_DIR.parent
VENV_BIN = REPO / ".venv" / "bin"

WAIT_TIMEOUT_S = float(os.environ.get("LAKEPREP_STACK_TIMEOUT", "180"))
STOP_GRACE_S = 60.0  # Airflow's api-server and scheduler take 3-45 s to stop on SIGTERM
HTTP_TIMEOUT_S = 30.0  # a busy single-worker api-server can take seconds to answer
PG_SYSTEM_USER = "postgres"
DB_NAME = "airflow"
DB_ROLE = "airflow"
DEFAULT_USER = "admin"
LOCAL_SPARK = '{"conn_type": "spark", "host": "local[2]"}'  # the Makefile's default
CODE_DIRS = ("plugins", "spark_jobs", "training", "contracts")  # PYTHONPATH, as the Makefile sets it
# The components /api/v2/monitor/health reports, and the service whose log explains each.
HEALTH_COMPONENTS = {
    "metadatabase": "postgres",
    "scheduler": "scheduler",
    "dag_processor": "dag-processor",
    "triggerer": "triggerer",
}


class StackError(supervise.ServiceError):
    """A service could not be set up, started, reached or stopped; the message says which and why."""


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class Ports(supervise.EnvPorts):
    """The loopback ports of one stack: fixed defaults, each overridable by env
    (``Ports.free()``: ports free now, for a throwaway stack beside a developer's own)."""

    variable: ClassVar[str] = "LAKEPREP_STACK_{}_PORT"
    error: ClassVar[type[StackError]] = StackError

    postgres: int = 15432
    api: int = 18080
    worker_log: int = 18793
    trigger_log: int = 18794


@dataclass(frozen=True)
class Settings:
    """What one stack was started with; written to stack.json so env/status/down agree with up."""

    ports: Ports
    lake_root: str
    spark_conn: str
    username: str
    password: str
    db_password: str
    fernet_key: str
    jwt_secret: str
    api_secret_key: str
    # Where the DAG file finds the dataset specs (LAKEPREP_PIPELINES_DIR); None: <repo>/pipelines.
    pipelines_dir: str | None = None

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.ports.api}"

    @property
    def sql_alchemy_conn(self) -> str:
        # psycopg2 for the sync engine; Airflow derives postgresql+asyncpg:// for its async one.
        return f"postgresql+psycopg2://{DB_ROLE}:{self.db_password}@{HOST}:{self.ports.postgres}/{DB_NAME}"


@dataclass(frozen=True)
class Stack(supervise.StateDir):
    """Where one stack keeps its state."""

    error: ClassVar[type[StackError]] = StackError
    dir_variable: ClassVar[str] = "LAKEPREP_STACK_DIR"
    ports_variable: ClassVar[str] = "LAKEPREP_STACK_*_PORT"
    wait_timeout_s: ClassVar[float] = WAIT_TIMEOUT_S

    @property
    def settings_file(self) -> Path:
        return self.state_dir / "stack.json"

    @property
    def pg_data(self) -> Path:
        return self.state_dir / "postgres"

    @property
    def pg_socket_dir(self) -> Path:
        return self.state_dir / "postgres-socket"

    @property
    def airflow_home(self) -> Path:
        return self.state_dir / "airflow"

    @property
    def passwords_file(self) -> Path:
        return self.airflow_home / "passwords.json"

    @property
    def cache_dir(self) -> Path:
        return self.state_dir / "cache"


def stack_config(state_dir: str | os.PathLike[str] | None = None) -> Stack:
    """Resolve the state dir (argument, else $LAKEPREP_STACK_DIR, else <repo>/.stack)."""
    return Stack(Stack.resolve(state_dir, Stack.dir_variable, REPO / ".stack"))


def load_settings(stack: Stack) -> Settings | None:
    try:
        raw = json.loads(stack.settings_file.read_text())
    except FileNotFoundError:
        return None
    return Settings(**{**raw, "ports": Ports(**raw["ports"])})


def _new_settings(
    previous: Settings | None,
    ports: Ports | None,
    lake_root: str | None,
    spark_conn: str | None,
    username: str | None,
    pipelines_dir: str | None = None,
) -> Settings:
    """Ports, lake, Spark and specs from the arguments or the environment; secrets kept across ups."""
    token = secrets.token_urlsafe
    return Settings(
        ports=ports or Ports.from_env(),
        lake_root=lake_root or os.environ.get("AIRFLOW_VAR_LAKEPREP_LAKE_ROOT") or f"file://{REPO}/.lake",
        spark_conn=spark_conn or os.environ.get("AIRFLOW_CONN_SPARK_DEFAULT") or LOCAL_SPARK,
        username=username or os.environ.get("LAKEPREP_STACK_USER") or DEFAULT_USER,
        password=previous.password if previous else token(18),
        db_password=previous.db_password if previous else secrets.token_hex(16),  # no quoting in SQL
        # Fernet.generate_key(): 32 random bytes, url-safe base64.
        fernet_key=previous.fernet_key if previous else base64.urlsafe_b64encode(os.urandom(32)).decode(),
        jwt_secret=previous.jwt_secret if previous else token(32),
        api_secret_key=previous.api_secret_key if previous else token(32),
        pipelines_dir=pipelines_dir or os.environ.get("LAKEPREP_PIPELINES_DIR") or None,
    )


def save_settings(stack: Stack, settings: Settings) -> None:
    supervise.write_private(stack.settings_file, json.dumps(asdict(settings), indent=2) + "\n")


def airflow_cfg(stack: Stack, settings: Settings) -> str:
    """The whole Airflow configuration of the stack, secrets included (the file is 0600).

    In airflow.cfg rather than the services' environment so that ``env`` can print a
    shell setup without secrets, and any ``airflow`` CLI with this AIRFLOW_HOME matches.
    """
    ports = settings.ports
    sections = {
        "core": {
            "executor": "LocalExecutor",
            "dags_folder": REPO / "dags",
            "plugins_folder": REPO / "plugins",
            "load_examples": "False",
            "unit_test_mode": "False",
            # LocalExecutor forks `parallelism` workers up front (32 by default, ~130 MB each).
            "parallelism": 4,
            # New DAGs wait for someone to unpause them, as in production.
            "dags_are_paused_at_creation": "True",
            "fernet_key": settings.fernet_key,
            # Task runners report to the api-server's Execution API (default localhost:8080).
            "execution_api_server_url": f"{settings.base_url}/execution/",
            "auth_manager": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
            "simple_auth_manager_all_admins": "False",
            "simple_auth_manager_users": f"{settings.username}:admin",
            "simple_auth_manager_passwords_file": stack.passwords_file,
        },
        "database": {"sql_alchemy_conn": settings.sql_alchemy_conn},
        "api": {
            "host": HOST,
            "port": ports.api,
            "workers": 1,
            "secret_key": settings.api_secret_key,
            "base_url": settings.base_url,
        },
        # Shared by the api-server (verifies) and scheduler/triggerer (sign task tokens).
        "api_auth": {"jwt_secret": settings.jwt_secret},
        "logging": {
            "base_log_folder": stack.airflow_home / "logs",
            "worker_log_server_port": ports.worker_log,
            "trigger_log_server_port": ports.trigger_log,
        },
        # New or changed DAG files are seen within seconds (default 300 s).
        "dag_processor": {"refresh_interval": 5},
    }
    lines = ["# Generated by ops/airflow_stack.py at every `up`; edit the tool, not this file."]
    for section, options in sections.items():
        lines += ["", f"[{section}]", *(f"{key} = {value}" for key, value in options.items())]
    return "\n".join(lines) + "\n"


def write_configs(stack: Stack, settings: Settings) -> None:
    """airflow.cfg and the SimpleAuthManager password file, regenerated at every ``up``."""
    supervise.write_private(stack.airflow_home / "airflow.cfg", airflow_cfg(stack, settings))
    supervise.write_private(stack.passwords_file, json.dumps({settings.username: settings.password}) + "\n")


def project_env(stack: Stack, settings: Settings) -> dict[str, str]:
    """What the Makefile exports for lakeprep, pointed at this stack (no secrets)."""
    specs = {"LAKEPREP_PIPELINES_DIR": settings.pipelines_dir} if settings.pipelines_dir else {}
    return {
        **specs,
        "AIRFLOW_HOME": str(stack.airflow_home),
        "AIRFLOW_CONFIG": str(stack.airflow_home / "airflow.cfg"),
        "AIRFLOW_VAR_LAKEPREP_LAKE_ROOT": settings.lake_root,
        "AIRFLOW_CONN_SPARK_DEFAULT": settings.spark_conn,
        "PYSPARK_PYTHON": str(VENV_BIN / "python"),
        "PYTHONPATH": os.pathsep.join(str(REPO / folder) for folder in CODE_DIRS),
        "LAKEPREP_CACHE_DIR": str(stack.cache_dir),
    }


def service_env(stack: Stack, settings: Settings) -> dict[str, str]:
    """The services' environment: the caller's, minus any AIRFLOW__* override, plus the project's.

    The Makefile and the test conftest export AIRFLOW__* for the embedded SQLite setup;
    those would beat airflow.cfg, so none is passed on. Other connections and variables
    (AIRFLOW_CONN_WEBHDFS_DEFAULT, HADOOP_CONF_DIR from hadoop/cluster.py env) are.
    """
    inherited = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("AIRFLOW__") and key not in ("AIRFLOW_HOME", "AIRFLOW_CONFIG")
    }
    return {
        **inherited,
        **project_env(stack, settings),
        # spark-submit and the `airflow` of task runners come from the venv.
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }


# --------------------------------------------------------------------------- PostgreSQL


def _pg_bin() -> Path:
    """Debian's newest installed server binaries (the package puts them off PATH)."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda path: int(path.parent.parent.name)
    )
    if not found:
        raise StackError(
            "PostgreSQL server binaries not found in /usr/lib/postgresql/*/bin: "
            "apt-get install postgresql (make system-deps does)"
        )
    return found[-1].parent


def _as_pg_user(argv: list[str]) -> list[str]:
    """PostgreSQL refuses to start as root: run its tools as the postgres system user then."""
    if os.geteuid() != 0:
        return argv
    try:
        pwd.getpwnam(PG_SYSTEM_USER)
    except KeyError as err:
        raise StackError(f"running as root but there is no {PG_SYSTEM_USER!r} system user") from err
    return ["runuser", "-u", PG_SYSTEM_USER, "--", *argv]


def _pg_run(stack: Stack, argv: list[str], what: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        _as_pg_user(argv),
        capture_output=True,
        text=True,
        cwd="/",  # runuser keeps the cwd, which the postgres user may not be allowed to enter
        timeout=WAIT_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise StackError(
            f"{what} failed ({done.returncode}): {shlex.join(argv)}\n{(done.stdout + done.stderr).strip()}\n"
            + tail(stack.log_file("postgres"))
        )
    return done


def _hand_to_pg_user(stack: Stack, *paths: Path) -> None:
    """Make the PostgreSQL folders its own and check it can reach them through the state dir."""
    for path in paths:
        path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return
    entry = pwd.getpwnam(PG_SYSTEM_USER)
    # The state dir may be a 0700 tempdir (pytest's, mkdtemp's): the user must traverse it.
    os.chmod(stack.state_dir, os.stat(stack.state_dir).st_mode | 0o711)
    for path in paths:
        os.chown(path, entry.pw_uid, entry.pw_gid)
        path.chmod(0o700)
    log = stack.log_file("postgres")
    log.touch()
    os.chown(log, entry.pw_uid, entry.pw_gid)
    probe = subprocess.run(_as_pg_user(["test", "-w", str(stack.pg_data)]), cwd="/", check=False)
    if probe.returncode != 0:
        raise StackError(
            f"the {PG_SYSTEM_USER!r} user cannot write {stack.pg_data}: a folder above it is not "
            f"traversable by others; choose another LAKEPREP_STACK_DIR"
        )


def postgres_running(stack: Stack) -> bool:
    if not (stack.pg_data / "postmaster.pid").is_file():
        return False
    argv = _as_pg_user([str(_pg_bin() / "pg_ctl"), "status", "-D", str(stack.pg_data)])
    return subprocess.run(argv, capture_output=True, cwd="/", check=False).returncode == 0


def _init_postgres(stack: Stack) -> bool:
    """initdb on first use only (an empty data folder), never over an existing cluster."""
    if (stack.pg_data / "PG_VERSION").is_file():
        return False
    argv = [
        str(_pg_bin() / "initdb"),
        *("-D", str(stack.pg_data), "-U", "postgres", "-E", "UTF8", "--no-locale"),
        # Trust only on the socket, whose folder only the postgres user can open.
        *("--auth-local=trust", "--auth-host=scram-sha-256"),
    ]
    _pg_run(stack, argv, "initdb")
    return True


def _start_postgres(stack: Stack, settings: Settings) -> None:
    options = (
        f"-c listen_addresses={HOST} -c port={settings.ports.postgres} "
        f"-c unix_socket_directories={stack.pg_socket_dir}"
    )
    argv = [
        str(_pg_bin() / "pg_ctl"),
        *("start", "-D", str(stack.pg_data), "-l", str(stack.log_file("postgres"))),
        *("-o", options, "-w", "-t", str(int(WAIT_TIMEOUT_S))),
    ]
    # Own session: a Ctrl-C in the terminal that started `up` (or pytest) must not reach it.
    done = subprocess.run(
        _as_pg_user(argv),
        capture_output=True,
        text=True,
        cwd="/",
        timeout=WAIT_TIMEOUT_S + 10,
        start_new_session=True,
        check=False,
    )
    if done.returncode != 0:
        raise StackError(
            f"pg_ctl start failed ({done.returncode}) on {HOST}:{settings.ports.postgres}: "
            f"{(done.stdout + done.stderr).strip()}\n" + tail(stack.log_file("postgres"))
        )


def _psql(stack: Stack, settings: Settings, sql: str, database: str = "postgres") -> str:
    argv = [
        str(_pg_bin() / "psql"),
        *("-h", str(stack.pg_socket_dir), "-p", str(settings.ports.postgres), "-U", "postgres"),
        *("-d", database, "-v", "ON_ERROR_STOP=1", "-tA", "-c", sql),
    ]
    return _pg_run(stack, argv, f"psql {sql.split()[0]}").stdout.strip()


def _ensure_database(stack: Stack, settings: Settings) -> None:
    """The airflow role (its password set to the stack's at every up) and database it owns."""
    exists = _psql(stack, settings, f"SELECT 1 FROM pg_roles WHERE rolname = '{DB_ROLE}'")
    verb = "ALTER" if exists == "1" else "CREATE"
    _psql(stack, settings, f"{verb} ROLE {DB_ROLE} LOGIN PASSWORD '{settings.db_password}'")
    if _psql(stack, settings, f"SELECT 1 FROM pg_database WHERE datname = '{DB_NAME}'") != "1":
        _psql(stack, settings, f"CREATE DATABASE {DB_NAME} OWNER {DB_ROLE}")


def _stop_postgres(stack: Stack) -> bool:
    if not postgres_running(stack):
        return False
    argv = [str(_pg_bin() / "pg_ctl"), "stop", "-D", str(stack.pg_data), "-m", "fast", "-w", "-t", "60"]
    _pg_run(stack, argv, "pg_ctl stop")
    return True


# --------------------------------------------------------------------------- Airflow services


@dataclass(frozen=True)
class Service:
    """One Airflow component: its CLI subcommand and arguments."""

    name: str  # pid and log file stem
    args: tuple[str, ...]


# Start order; ``down`` signals all at once. The scheduler and triggerer skip serve-logs,
# which would bind 0.0.0.0 (see the module docstring).
SERVICES = (
    Service("api-server", ("api-server",)),
    Service("scheduler", ("scheduler", "--skip-serve-logs")),
    Service("dag-processor", ("dag-processor",)),
    Service("triggerer", ("triggerer", "--skip-serve-logs")),
)


def running_pid(stack: Stack, service: Service) -> int | None:
    """The service's pid if that process is still the one we started (``supervise.running_pid``)."""
    return supervise.running_pid(stack, service.name)


def _start(stack: Stack, settings: Settings, service: Service) -> int:
    """Launch a service in its own session (it outlives the CLI), logging to logs/<name>.log."""
    argv = [str(VENV_BIN / "airflow"), *service.args]
    return supervise.start(stack, service.name, argv, service_env(stack, settings))


# --------------------------------------------------------------------------- readiness


def _health(settings: Settings) -> dict[str, Any]:
    """The public health endpoint (no login), with the stdlib so that `status` runs anywhere."""
    url = f"{settings.base_url}/api/v2/monitor/health"
    with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as response:
        return json.loads(response.read())


def _unhealthy(health: dict[str, Any]) -> list[str]:
    return [name for name in HEALTH_COMPONENTS if (health.get(name) or {}).get("status") != "healthy"]


def _wait_healthy(stack: Stack, settings: Settings) -> None:
    """Poll the health endpoint until every component is healthy; fail fast if a service dies."""
    waiting = ["api-server"]  # the components the last answer had unhealthy

    def probe() -> str | None:
        waiting[:] = ["api-server"]  # until it answers
        health = _health(settings)
        waiting[:] = _unhealthy(health)
        return ", ".join(f"{name}: {health.get(name)}" for name in waiting) or None

    supervise.wait(
        stack,
        f"{settings.base_url}/api/v2/monitor/health",
        probe,
        [service.name for service in SERVICES],
        lambda: HEALTH_COMPONENTS.get(waiting[0], waiting[0]),
        interval_s=1.0,
    )


def _migrate(stack: Stack, settings: Settings) -> None:
    log_path = stack.log_file("db-migrate")
    with log_path.open("ab") as log:
        done = subprocess.run(
            [str(VENV_BIN / "airflow"), "db", "migrate"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=service_env(stack, settings),
            cwd=stack.state_dir,
            timeout=600,
            check=False,
        )
    if done.returncode != 0:
        raise StackError(f"airflow db migrate failed ({done.returncode})\n" + tail(log_path))


# --------------------------------------------------------------------------- REST client


# Keys of a structured log line that every line repeats, or that the text shows already.
LOG_CONTEXT_KEYS = frozenset(
    ("timestamp", "event", "level", "logger", "dag_id", "run_id", "task_id", "ti_id", "map_index")
    + ("try_number", "filename", "lineno")
)


# A PATCH (a run's or a task's new state) that the database rolled back, a deadlock with the
# scheduler updating the same run's task instances: PostgreSQL aborts one of the two
# transactions and the api-server answers 500 "Database error" without retrying (the
# scheduler retries its own side). Setting a state is idempotent, so the client sends it again.
DB_ERROR_RETRIES = 3


def _rolled_back(response: requests.Response) -> bool:
    if response.status_code != 500:
        return False
    try:
        body = response.json()
    except ValueError:
        return False
    detail = body.get("detail") if isinstance(body, dict) else None
    return isinstance(detail, dict) and detail.get("reason") == "Database error"


class AirflowClient:
    """A small client for the stack's REST API, logged in like a user.

    ``POST /auth/token`` with the username and password gives a JWT; every call then sends
    it as ``Authorization: Bearer``. A 401 (expired token) logs in again once; a PATCH that
    the database rolled back (500 "Database error", `_rolled_back`) is sent again.
    """

    def __init__(self, base_url: str, username: str, password: str, timeout: float = HTTP_TIMEOUT_S) -> None:
        import requests

        self.base_url = base_url.rstrip("/")
        self.username = username
        self._password = password
        self.timeout = max(timeout, 10.0)
        self.session = requests.Session()
        self._token: str | None = None

    def login(self) -> str:
        response = self.session.post(
            f"{self.base_url}/auth/token",
            json={"username": self.username, "password": self._password},
            timeout=self.timeout,
        )
        if response.status_code not in (200, 201):
            raise StackError(
                f"POST /auth/token as {self.username!r} answered {response.status_code}: {response.text}"
            )
        self._token = response.json()["access_token"]
        return self._token

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """One authenticated call; the raw response, whatever its status."""
        for attempt in range(2):
            token = self._token or self.login()
            headers = {"Authorization": f"Bearer {token}", **kwargs.pop("headers", {})}
            response = self.session.request(
                method, f"{self.base_url}{path}", headers=headers, timeout=self.timeout, **kwargs
            )
            if response.status_code != 401 or attempt:
                return response
            self._token = None
        return response

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        retries = DB_ERROR_RETRIES if method == "PATCH" else 0
        for attempt in range(retries + 1):
            response = self.request(method, path, **kwargs)
            if response.ok or attempt == retries or not _rolled_back(response):
                break
            time.sleep(0.5 * (attempt + 1))
        if not response.ok:
            raise StackError(f"{method} {path} answered {response.status_code}: {response.text[:2000]}")
        return response.json()

    def get(self, path: str, **params: Any) -> Any:
        return self._json("GET", path, params=params or None)

    def post(self, path: str, body: Any) -> Any:
        return self._json("POST", path, json=body)

    def patch(self, path: str, body: Any, **params: Any) -> Any:
        return self._json("PATCH", path, json=body, params=params or None)

    def wait_for_dag(self, dag_id: str, timeout: float = WAIT_TIMEOUT_S) -> dict:
        """The DAG once the dag-processor has serialized it; import errors end the wait early."""
        deadline = time.monotonic() + timeout
        while True:
            response = self.request("GET", f"/api/v2/dags/{dag_id}")
            if response.ok:
                return response.json()
            errors = self.get("/api/v2/importErrors")["import_errors"]
            if errors:
                raise StackError(f"DAG {dag_id} not parsed; import errors: {json.dumps(errors, indent=2)}")
            if time.monotonic() > deadline:
                raise StackError(f"DAG {dag_id} not visible after {timeout:.0f} s: {response.status_code}")
            time.sleep(1.0)

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int, map_index: int = -1) -> str:
        """A task attempt's log as text (the API gives structured lines)."""
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}"
        params = {"full_content": "true", "map_index": map_index}
        response = self.request("GET", path, params=params, headers={"Accept": "application/json"})
        if not response.ok:
            return f"(GET {path} answered {response.status_code}: {response.text[:500]})"
        lines = []
        for item in response.json().get("content", []):
            if isinstance(item, dict):
                extra = {k: v for k, v in item.items() if k not in LOG_CONTEXT_KEYS}
                when, level, event = item.get("timestamp", ""), item.get("level", ""), item.get("event", "")
                lines.append(f"{when} {level} {event} {extra or ''}".strip())
            else:
                lines.append(str(item))
        return "\n".join(lines)


def client(state_dir: str | os.PathLike[str] | None = None) -> AirflowClient:
    """A logged-in client for the running stack of this state dir."""
    settings = load_settings(stack_config(state_dir))
    if settings is None:
        raise StackError("no stack.json: run `up` first")
    return AirflowClient(settings.base_url, settings.username, settings.password)


# --------------------------------------------------------------------------- lifecycle


def up(
    state_dir: str | os.PathLike[str] | None = None,
    *,
    lake_root: str | None = None,
    ports: Ports | None = None,
    spark_conn: str | None = None,
    username: str | None = None,
    pipelines_dir: str | os.PathLike[str] | None = None,
) -> dict:
    """Start whatever is not running yet and wait until every component reports healthy.

    Idempotent: a running stack is kept (a second call only re-checks), and must have been
    started with the same lake root and ports. Returns ``{"base_url", "username",
    "password", "airflow_home", "state_dir", "env", "started", "seconds"}``.
    """
    began = time.monotonic()
    stack = stack_config(state_dir)
    previous = load_settings(stack)
    running = [service.name for service in SERVICES if running_pid(stack, service) is not None]
    if postgres_running(stack):
        running.insert(0, "postgres")
    specs = str(Path(pipelines_dir).resolve()) if pipelines_dir else None
    wanted = _new_settings(previous, ports, lake_root, spark_conn, username, specs)
    if running and previous is not None:

        def fixed(s: Settings) -> tuple:
            return (s.ports, s.lake_root, s.spark_conn, s.username, s.pipelines_dir)

        if fixed(previous) != fixed(wanted):
            raise StackError(
                f"the stack in {stack.state_dir} is running ({', '.join(running)}) with lake "
                f"{previous.lake_root}, ports {previous.ports}, Spark {previous.spark_conn}, specs "
                f"{previous.pipelines_dir or 'pipelines/'}; run `down` before starting it with lake "
                f"{wanted.lake_root}, ports {wanted.ports}, Spark {wanted.spark_conn}, specs "
                f"{wanted.pipelines_dir or 'pipelines/'}"
            )
        wanted = previous
    settings = wanted
    for folder in (stack.logs_dir, stack.pids_dir, stack.airflow_home, stack.cache_dir):
        folder.mkdir(parents=True, exist_ok=True)
    save_settings(stack, settings)
    write_configs(stack, settings)
    ports = {"postgres": settings.ports.postgres, "api-server": settings.ports.api}
    supervise.check_ports_free(stack, {name: port for name, port in ports.items() if name not in running})

    started = []
    if "postgres" not in running:
        _hand_to_pg_user(stack, stack.pg_data, stack.pg_socket_dir)
        _init_postgres(stack)
        _start_postgres(stack, settings)
        started.append("postgres")
    _ensure_database(stack, settings)
    _migrate(stack, settings)
    for service in SERVICES:
        if service.name not in running:
            _start(stack, settings, service)
            started.append(service.name)
    _wait_healthy(stack, settings)
    return {
        "base_url": settings.base_url,
        "username": settings.username,
        "password": settings.password,
        "airflow_home": str(stack.airflow_home),
        "state_dir": str(stack.state_dir),
        "lake_root": settings.lake_root,
        "env": project_env(stack, settings),
        "started": started,
        "seconds": round(time.monotonic() - began, 1),
    }


def down(state_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """Stop the Airflow services (whole sessions), then PostgreSQL; returns what was stopped."""
    stack = stack_config(state_dir)
    stopped = supervise.stop_sessions(stack, [service.name for service in SERVICES], STOP_GRACE_S)
    if stack.pg_data.is_dir() and _stop_postgres(stack):
        stopped.append("postgres")
    return stopped


def status(state_dir: str | os.PathLike[str] | None = None) -> dict[str, dict]:
    """Per service: pid (None if not running), endpoint, and up; health from the API when it answers."""
    stack = stack_config(state_dir)
    settings = load_settings(stack)
    ports = settings.ports if settings else Ports.from_env()
    health: dict[str, Any] = {}
    api_pid = running_pid(stack, SERVICES[0])
    if settings is not None and api_pid is not None:
        try:
            health = _health(settings)
        except (OSError, ValueError) as err:  # status reports, it does not fail
            health = {"error": f"{type(err).__name__}: {err}"}
    pg_pid = None
    if stack.pg_data.is_dir() and postgres_running(stack):
        pg_pid = int((stack.pg_data / "postmaster.pid").read_text().split()[0])
    report = {
        "postgres": {
            "pid": pg_pid,
            "endpoint": f"postgresql://{HOST}:{ports.postgres}/{DB_NAME}",
            "up": pg_pid is not None and supervise.port_open(ports.postgres),
        }
    }
    component = {value: key for key, value in HEALTH_COMPONENTS.items()}
    for service in SERVICES:
        pid = running_pid(stack, service)
        if service.name == "api-server":
            up_now, endpoint = (
                pid is not None and supervise.port_open(ports.api),
                f"http://{HOST}:{ports.api}",
            )
        else:
            state = (health.get(component[service.name]) or {}).get("status")
            up_now, endpoint = pid is not None and state == "healthy", f"health: {state or '-'}"
        report[service.name] = {"pid": pid, "endpoint": endpoint, "up": up_now}
    return report


def shell_env(state_dir: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """Exports for a shell whose ``airflow`` CLI should use the stack (no secrets: they are
    in the 0600 airflow.cfg). The AIRFLOW__* the Makefile exports are unset by ``env``."""
    stack = stack_config(state_dir)
    settings = load_settings(stack)
    if settings is None:
        raise StackError(f"no {stack.settings_file}: run `up` first")
    return {**project_env(stack, settings), "LAKEPREP_STACK_URL": settings.base_url}


# --------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("up", "down", "status", "env"))
    parser.add_argument("--lake", help="lake root URI for `up` (default $AIRFLOW_VAR_LAKEPREP_LAKE_ROOT)")
    args = parser.parse_args(argv)
    command = args.command

    def action() -> int | None:
        if command == "up":
            result = up(lake_root=args.lake)
            supervise.print_status(status())
            print(f"up in {result['seconds']} s; started: {', '.join(result['started']) or 'nothing'}")
            print(f"lake: {result['lake_root']}")
            print(f"UI: {result['base_url']}/  login: {result['username']} / {result['password']}")
            print(f'CLI: eval "$(python {Path(__file__).relative_to(REPO)} env)"')
        elif command == "down":
            print(f"stopped: {', '.join(down()) or 'nothing was running'}")
        elif command == "status":
            return supervise.status_exit(status())
        else:
            overrides = sorted(key for key in os.environ if key.startswith("AIRFLOW__"))
            if overrides:
                print(f"unset {' '.join(overrides)}")
            supervise.print_exports(shell_env())
        return None

    return supervise.run_command("airflow stack", command, action)


if __name__ == "__main__":
    sys.exit(main())
