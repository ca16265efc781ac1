"""A real single-node HDFS + Spark standalone (+ YARN) cluster on loopback, for tests and local runs.

    python hadoop/cluster.py up [--yarn]       # fetch Hadoop if needed, format once, start, wait
    eval "$(python hadoop/cluster.py env [--yarn])"
    python hadoop/cluster.py status [--yarn]   # exit 0 when every service is up, 3 otherwise
    python hadoop/cluster.py down              # stops YARN too if it runs

Services, all bound to 127.0.0.1 on fixed ports (the defaults below; each can be moved
with LAKEPREP_NN_RPC_PORT, LAKEPREP_NN_HTTP_PORT, LAKEPREP_DN_DATA_PORT,
LAKEPREP_DN_HTTP_PORT, LAKEPREP_DN_IPC_PORT, LAKEPREP_SPARK_MASTER_PORT,
LAKEPREP_SPARK_MASTER_UI_PORT, LAKEPREP_SPARK_WORKER_UI_PORT, and for YARN LAKEPREP_RM_*_PORT,
LAKEPREP_NM_*_PORT after the fields of ``Ports``):

- NameNode and DataNode: Hadoop 3.5.0 from Maven Central (``hadoop/pom.xml`` copies the
  jars to ``hadoop/.dist``), run with plain ``java`` because there is no Hadoop tarball
  and so no ``bin/hdfs`` script. 3.5.0 is the same version as the client jars inside
  the pyspark 4.3.0 wheel, and the first Hadoop whose server side supports Java 17.
- Spark standalone master and one worker: ``spark-class`` from the venv's pyspark, so
  the cluster runs exactly the Spark that ``spark-submit`` and the jobs use.
- With ``--yarn`` (``up(yarn=True)``): a YARN ResourceManager and one NodeManager from the
  same Hadoop artifacts, sized for a small shared machine (``yarn_site``); the client
  environment (``client_env(yarn=True)``) then points Spark at YARN in cluster deploy
  mode, with a Spark conf dir that makes the NodeManager's containers use the venv's
  Spark jars and Python. Without it nothing of YARN starts.

Every wait gives up after LAKEPREP_CLUSTER_TIMEOUT seconds (120) and reports the endpoint
and the tail of the relevant log.

Everything the cluster writes lives in one state dir, ``<repo>/.cluster`` unless
``LAKEPREP_CLUSTER_DIR`` says otherwise: ``conf/`` (generated from ``hadoop/conf``),
``client-conf/`` (a HADOOP_CONF_DIR for clients), ``data/``, ``logs/``, ``pids/``.

The module is stdlib-only and importable: ``up()``, ``down()``, ``status()``,
``client_env()`` and ``stop_service()`` are what pytest fixtures and tests call. Starting,
recognising (pid files with start times), waiting for and stopping the daemons is
``ops/supervise.py``, shared with ``ops/airflow_stack.py``; this file holds the service
list and what is Hadoop's and Spark's.
"""

from __future__ import annotations

import argparse
import getpass
import hashlib
import http.client
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, NamedTuple

HADOOP_DIR = Path(__file__).resolve().parent
REPO = HADOOP_DIR.parent
if str(REPO / "ops") not in sys.path:  # ops/ is a tool folder, not a package
    sys.path.append(str(REPO / "ops"))
import supervise  # noqa: E402
from supervise import HOST  # noqa: E402

TEMPLATES = HADOOP_DIR / "conf"
POM = HADOOP_DIR / "pom.xml"
DIST = HADOOP_DIR / ".dist"
LIB = DIST / "lib"
# Written after a successful Maven run; holds the pom's hash, so editing the pom refetches.
DIST_STAMP = DIST / ".complete"
DIST_REQUIRED = (
    "lib/hadoop-common-3.5.0.jar",
    "lib/hadoop-auth-3.5.0.jar",
    "lib/hadoop-hdfs-3.5.0.jar",
    "lib/hadoop-hdfs-client-3.5.0.jar",
    "webapps/hdfs/WEB-INF/web.xml",
    "webapps/datanode/WEB-INF/web.xml",
)

WAIT_TIMEOUT_S = float(os.environ.get("LAKEPREP_CLUSTER_TIMEOUT", "120"))
STOP_GRACE_S = 15.0

# What bin/hdfs adds on JDK 17 (hadoop_finalize_jpms_opts in hadoop-functions.sh, HADOOP-19310),
# plus Spark's JavaModuleOptions list. Extra --add-opens are harmless; a missing one is
# an InaccessibleObjectException at run time.
JAVA17_FLAGS = (
    "-XX:+IgnoreUnrecognizedVMOptions",
    *(
        f"--add-opens=java.base/{package}=ALL-UNNAMED"
        for package in (
            "java.io",
            "java.lang",
            "java.lang.invoke",
            "java.lang.reflect",
            "java.math",
            "java.net",
            "java.nio",
            "java.text",
            "java.util",
            "java.util.concurrent",
            "java.util.concurrent.atomic",
            "java.util.zip",
            "jdk.internal.ref",
            "sun.nio.ch",
            "sun.nio.cs",
            "sun.security.action",
            "sun.security.util",
            "sun.security.x509",
            "sun.util.calendar",
        )
    ),
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Djava.net.preferIPv4Stack=true",
)

# Start-up cost is what matters for a test cluster on a small box: C1 only and the serial
# GC halve the CPU that four daemons burn while starting (measured on 2 cores: 23.6 -> 11.5
# CPU seconds, `up` 26 -> 13 s) at the same resident memory. The daemons move little
# data; Spark executors are separate JVMs and keep the default JIT and GC.
DAEMON_JVM_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


class ClusterError(supervise.ServiceError):
    """A service could not be fetched, started or reached; the message says which and why."""


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class Ports(supervise.EnvPorts):
    """The fixed loopback ports: the Hadoop 3 and Spark defaults, each overridable by env."""

    variable: ClassVar[str] = "LAKEPREP_{}_PORT"
    error: ClassVar[type[ClusterError]] = ClusterError

    nn_rpc: int = 8020
    nn_http: int = 9870
    dn_data: int = 9866
    dn_http: int = 9864
    dn_ipc: int = 9867
    spark_master: int = 7077
    spark_master_ui: int = 8080
    spark_worker_ui: int = 8081
    rm_rpc: int = 8032
    rm_scheduler: int = 8030
    rm_tracker: int = 8031
    rm_admin: int = 8033
    rm_http: int = 8088
    nm_rpc: int = 8041
    nm_localizer: int = 8040
    nm_http: int = 8042


@dataclass(frozen=True)
class Cluster(supervise.StateDir):
    """Where one cluster keeps its state, which ports it uses, and who runs it."""

    ports: Ports
    user: str

    error: ClassVar[type[ClusterError]] = ClusterError
    dir_variable: ClassVar[str] = "LAKEPREP_CLUSTER_DIR"
    ports_variable: ClassVar[str] = "LAKEPREP_*_PORT"
    wait_timeout_s: ClassVar[float] = WAIT_TIMEOUT_S

    @property
    def conf_dir(self) -> Path:
        return self.state_dir / "conf"

    @property
    def spark_conf_dir(self) -> Path:
        return self.conf_dir / "spark"

    @property
    def client_conf_dir(self) -> Path:
        return self.state_dir / "client-conf"

    @property
    def client_spark_conf_dir(self) -> Path:
        """SPARK_CONF_DIR for spark-submit against YARN (``client_env(yarn=True)``)."""
        return self.state_dir / "client-conf" / "spark-yarn"

    @property
    def yarn_dir(self) -> Path:
        """The NodeManager's local dirs (localized files, container work dirs) and container logs."""
        return self.data_dir / "yarn"

    @property
    def data_dir(self) -> Path:
        return self.state_dir / "data"

    @property
    def name_dir(self) -> Path:
        return self.data_dir / "namenode"

    @property
    def datanode_dir(self) -> Path:
        return self.data_dir / "datanode"


def cluster_config(state_dir: str | os.PathLike[str] | None = None) -> Cluster:
    """Resolve the state dir (argument, else $LAKEPREP_CLUSTER_DIR, else <repo>/.cluster)."""
    chosen = Cluster.resolve(state_dir, Cluster.dir_variable, REPO / ".cluster")
    return Cluster(chosen, Ports.from_env(), getpass.getuser())


# --------------------------------------------------------------------------- fetch


def _pom_hash() -> str:
    return hashlib.sha256(POM.read_bytes()).hexdigest()


def dist_complete() -> bool:
    """True when the last Maven copy finished for this very pom and its key files exist."""
    try:
        stamp = DIST_STAMP.read_text().strip()
    except FileNotFoundError:
        return False
    return stamp == _pom_hash() and all((DIST / path).is_file() for path in DIST_REQUIRED)


def fetch(force: bool = False) -> bool:
    """Copy the Hadoop server jars and webapps from Maven Central unless already complete.

    Returns whether Maven ran. A partial or outdated copy is removed first, because stale
    jars of another version in lib/ would end up on the daemons' classpath.
    """
    if dist_complete() and not force:
        return False
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ClusterError("mvn not found on PATH; Maven 3 is needed to fetch Hadoop 3.5.0 jars")
    # target/ holds the unpack goal's markers: left behind, Maven would skip the webapps.
    for stale in (LIB, DIST / "webapps", DIST / "target", DIST_STAMP):
        if stale.is_dir():
            shutil.rmtree(stale)
        elif stale.exists():
            stale.unlink()
    cmd = [mvn, "-B", "-q", "-f", str(POM), "package"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip().splitlines()
        raise ClusterError(
            f"{shlex.join(cmd)} failed with exit code {done.returncode}:\n" + "\n".join(output[-40:])
        )
    missing = [path for path in DIST_REQUIRED if not (DIST / path).is_file()]
    if missing:
        raise ClusterError(f"Maven finished but {DIST} lacks {missing}; check {POM}")
    DIST_STAMP.write_text(_pom_hash() + "\n")
    return True


# --------------------------------------------------------------------------- config files


def _render(template: str, values: dict[str, str]) -> str:
    """Fill @NAME@ placeholders; an unknown one is an error, not a silently broken config."""

    def substitute(match: re.Match[str]) -> str:
        if match.group(1) not in values:
            raise ClusterError(f"unknown placeholder {match.group(0)} in a hadoop/conf template")
        return values[match.group(1)]

    return re.sub(r"@([A-Z_]+)@", substitute, template)


def _hadoop_xml(properties: dict[str, str]) -> str:
    rows = "".join(
        f"  <property>\n    <name>{name}</name>\n    <value>{value}</value>\n  </property>\n"
        for name, value in properties.items()
    )
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<configuration>\n{rows}</configuration>\n'


def write_configs(cluster: Cluster) -> None:
    """Generate the daemon, client and Spark configs for this state dir and these ports.

    Regenerated at every ``up`` so that a changed template or port takes effect; the
    templates in git never hold absolute paths.
    """
    ports = cluster.ports
    values = {
        "CLUSTER_DIR": str(cluster.state_dir),
        "USER": cluster.user,
        "NN_RPC_PORT": str(ports.nn_rpc),
        "NN_HTTP_PORT": str(ports.nn_http),
        "DN_PORT": str(ports.dn_data),
        "DN_HTTP_PORT": str(ports.dn_http),
        "DN_IPC_PORT": str(ports.dn_ipc),
    }
    cluster.conf_dir.mkdir(parents=True, exist_ok=True)
    for name in ("core-site.xml", "hdfs-site.xml", "log4j.properties"):
        text = _render((TEMPLATES / name).read_text(), values)
        (cluster.conf_dir / name).write_text(text)

    # Clients (spark-submit via HADOOP_CONF_DIR) need only the address and, because the
    # shaded client jars carry no hdfs-default.xml, replication 1 (compiled default: 3).
    cluster.client_conf_dir.mkdir(parents=True, exist_ok=True)
    (cluster.client_conf_dir / "core-site.xml").write_text(
        _hadoop_xml({"fs.defaultFS": f"hdfs://{HOST}:{ports.nn_rpc}"})
    )
    (cluster.client_conf_dir / "hdfs-site.xml").write_text(
        _hadoop_xml(
            {
                "dfs.replication": "1",
                # With one DataNode there is nothing to swap a failed pipeline node for.
                "dfs.client.block.write.replace-datanode-on-failure.enable": "false",
            }
        )
    )

    yarn_addresses = {name: value for name, value in yarn_site(cluster).items() if name.endswith(".address")}
    (cluster.conf_dir / "yarn-site.xml").write_text(_hadoop_xml(yarn_site(cluster)))
    (cluster.conf_dir / "capacity-scheduler.xml").write_text(_hadoop_xml(CAPACITY_SCHEDULER))
    # Clients need the ResourceManager's addresses; Spark ships this folder to the
    # application master too, which asks the scheduler address for containers.
    (cluster.client_conf_dir / "yarn-site.xml").write_text(
        _hadoop_xml({"yarn.resourcemanager.hostname": HOST, **yarn_addresses})
    )
    write_yarn_spark_conf(cluster)

    # Passed as --properties-file, which also puts the state dir into the daemons'
    # command lines so that ``down`` can recognise them.
    cluster.spark_conf_dir.mkdir(parents=True, exist_ok=True)
    (cluster.spark_conf_dir / "spark-defaults.conf").write_text(
        "# Generated by hadoop/cluster.py at `up`.\n"
        "# PySpark apps cannot use standalone cluster deploy mode: no REST server (port 6066).\n"
        "spark.master.rest.enabled false\n"
        "# Remove finished applications' dirs from data/spark-work after a day.\n"
        "spark.worker.cleanup.enabled true\n"
        "spark.worker.cleanup.appDataTtl 86400\n"
    )


# YARN's queues: `default` and `ml` (the one the tests submit to, so that the connection's
# queue is seen to reach YARN). CapacityScheduler admits application masters up to 10 % of
# a queue by default, less than one Spark driver on this NodeManager: allow them all.
YARN_QUEUES = ("default", "ml")
CAPACITY_SCHEDULER = {
    "yarn.scheduler.capacity.root.queues": ",".join(YARN_QUEUES),
    **{f"yarn.scheduler.capacity.root.{queue}.capacity": "50" for queue in YARN_QUEUES},
    **{f"yarn.scheduler.capacity.root.{queue}.maximum-capacity": "100" for queue in YARN_QUEUES},
    "yarn.scheduler.capacity.maximum-am-resource-percent": "1.0",
}
# What the NodeManager offers. A Spark driver or executor of 1 GiB asks 1.375 GiB (384 MiB
# overhead), rounded up to 1.5 GiB: 4 GiB hold a cluster-mode driver and one executor, or
# a client-mode application master and two executors. Nothing reserves this memory up front;
# it is a ceiling on what the containers may use on a 24 GiB machine shared with others.
# vcores are not enforced without cgroups: 4 on 2 cores only lets the containers start.
NM_MEMORY_MB = 4096
NM_VCORES = 4


def yarn_site(cluster: Cluster) -> dict[str, str]:
    """yarn-site.xml of the ResourceManager and the NodeManager (all on loopback)."""
    ports = cluster.ports
    return {
        "yarn.resourcemanager.hostname": HOST,
        "yarn.resourcemanager.address": f"{HOST}:{ports.rm_rpc}",
        "yarn.resourcemanager.scheduler.address": f"{HOST}:{ports.rm_scheduler}",
        "yarn.resourcemanager.resource-tracker.address": f"{HOST}:{ports.rm_tracker}",
        "yarn.resourcemanager.admin.address": f"{HOST}:{ports.rm_admin}",
        "yarn.resourcemanager.webapp.address": f"{HOST}:{ports.rm_http}",
        "yarn.nodemanager.hostname": HOST,
        "yarn.nodemanager.address": f"{HOST}:{ports.nm_rpc}",
        "yarn.nodemanager.localizer.address": f"{HOST}:{ports.nm_localizer}",
        "yarn.nodemanager.webapp.address": f"{HOST}:{ports.nm_http}",
        "yarn.nodemanager.resource.memory-mb": str(NM_MEMORY_MB),
        "yarn.nodemanager.resource.cpu-vcores": str(NM_VCORES),
        "yarn.scheduler.minimum-allocation-mb": "512",
        "yarn.scheduler.maximum-allocation-mb": str(NM_MEMORY_MB),
        "yarn.scheduler.maximum-allocation-vcores": str(NM_VCORES),
        # A JVM reserves far more virtual memory than it uses (2.1 x physical is the
        # default limit): the virtual-memory check kills healthy containers.
        "yarn.nodemanager.vmem-check-enabled": "false",
        "yarn.nodemanager.local-dirs": str(cluster.yarn_dir / "local"),
        "yarn.nodemanager.log-dirs": str(cluster.yarn_dir / "logs"),
        # No log aggregation: a finished container's logs stay on the NodeManager, where
        # its web services serve them (what SparkStageOperator reads the driver's log from).
        "yarn.log-aggregation-enable": "false",
        "yarn.nodemanager.log.retain-seconds": "86400",
        # The NodeManager registers with a ResourceManager that starts beside it: retry
        # every second (default 30 s), give up after a minute (default 15 minutes).
        "yarn.resourcemanager.connect.retry-interval.ms": "1000",
        "yarn.resourcemanager.connect.max-wait.ms": "60000",
        "yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage": "98",
        # SIGTERM to SIGKILL for a container the NodeManager stops (default 5 s).
        "yarn.nodemanager.process-kill-wait.ms": "1000",
    }


def write_yarn_spark_conf(cluster: Cluster) -> None:
    """spark-defaults.conf for submissions to this YARN (``client_env(yarn=True)``).

    The NodeManager runs on this machine, so its containers can use the venv's own Spark
    jars and Python instead of an upload of 460 MB of jars with every submission (a real
    cluster sets ``spark.yarn.archive`` to a copy on HDFS, docs/CLUSTERS.md).
    """
    cluster.client_spark_conf_dir.mkdir(parents=True, exist_ok=True)
    try:
        spark_home = _spark_home()
    except ClusterError:
        return  # `status`/`down` without pyspark: `up` needs it and fails there
    python = spark_home.parents[3] / "bin" / "python"  # <venv>/lib/python3.x/site-packages/pyspark
    (cluster.client_spark_conf_dir / "spark-defaults.conf").write_text(
        "# Generated by hadoop/cluster.py at `up`: Spark on the loopback YARN.\n"
        f"spark.yarn.jars local:{spark_home}/jars/*\n"
        "# The driver (cluster mode) and the executors run the venv's interpreter.\n"
        f"spark.pyspark.python {python}\n"
        "# One executor: a driver and an executor fill the NodeManager's 4 GiB. Two cores:\n"
        "# TorchDistributor's two ranks are a barrier stage of two tasks, run at once.\n"
        "spark.executor.instances 1\n"
        "spark.executor.cores 2\n"
    )


# --------------------------------------------------------------------------- services


@dataclass(frozen=True)
class Service:
    """One daemon: what to run, how to recognise it, and where it listens."""

    name: str  # pid and log file stem
    runtime: str  # "hadoop" (plain java on hadoop/.dist) or "spark" (the venv's spark-class)
    main_class: str  # must appear in /proc/<pid>/cmdline, next to the state dir
    args: tuple[str, ...]
    heap: str
    port: int  # a listening port that proves the daemon is serving
    endpoint: str  # what status prints
    stop_grace_s: float = STOP_GRACE_S  # SIGTERM to SIGKILL


def services(cluster: Cluster) -> list[Service]:
    """All daemons, in start order (``down`` stops them in reverse)."""
    ports = cluster.ports
    properties = ("--properties-file", str(cluster.spark_conf_dir / "spark-defaults.conf"))
    master_url = f"spark://{HOST}:{ports.spark_master}"
    return [
        Service(
            name="namenode",
            runtime="hadoop",
            main_class="org.apache.hadoop.hdfs.server.namenode.NameNode",
            args=(),
            heap="512m",
            port=ports.nn_rpc,
            endpoint=f"hdfs://{HOST}:{ports.nn_rpc} http://{HOST}:{ports.nn_http}",
        ),
        Service(
            name="datanode",
            runtime="hadoop",
            main_class="org.apache.hadoop.hdfs.server.datanode.DataNode",
            args=(),
            heap="256m",
            port=ports.dn_data,
            endpoint=f"{HOST}:{ports.dn_data} http://{HOST}:{ports.dn_http}",
        ),
        Service(
            name="spark-master",
            runtime="spark",
            main_class="org.apache.spark.deploy.master.Master",
            args=(
                *("--host", HOST, "--port", str(ports.spark_master)),
                *("--webui-port", str(ports.spark_master_ui), *properties),
            ),
            heap="512m",
            port=ports.spark_master,
            endpoint=f"{master_url} http://{HOST}:{ports.spark_master_ui}",
        ),
        Service(
            name="spark-worker",
            runtime="spark",
            main_class="org.apache.spark.deploy.worker.Worker",
            args=(
                master_url,
                *("--host", HOST, "--cores", "2", "--memory", "2g"),
                *("--webui-port", str(ports.spark_worker_ui), *properties),
                *("--work-dir", str(cluster.data_dir / "spark-work")),
            ),
            heap="512m",
            port=ports.spark_worker_ui,
            endpoint=f"http://{HOST}:{ports.spark_worker_ui}",
        ),
    ]


def yarn_services(cluster: Cluster) -> list[Service]:
    """The ResourceManager and the NodeManager, in start order; only ``up(yarn=True)`` starts them."""
    ports = cluster.ports
    return [
        Service(
            name="resourcemanager",
            runtime="hadoop",
            main_class="org.apache.hadoop.yarn.server.resourcemanager.ResourceManager",
            args=(),
            heap="384m",
            port=ports.rm_http,
            endpoint=f"{HOST}:{ports.rm_rpc} http://{HOST}:{ports.rm_http}",
        ),
        Service(
            name="nodemanager",
            runtime="hadoop",
            main_class="org.apache.hadoop.yarn.server.nodemanager.NodeManager",
            args=(),
            heap="256m",
            port=ports.nm_http,
            endpoint=f"{HOST}:{ports.nm_rpc} http://{HOST}:{ports.nm_http}",
            # On SIGTERM the NodeManager kills its containers within about 2 s
            # (`process-kill-wait.ms` below), then waits up to 10 s for each of its
            # thread pools while its finished applications' logs are kept (measured
            # 15 s and more): nothing of value is left after 5 s.
            stop_grace_s=5.0,
        ),
    ]


def all_services(cluster: Cluster) -> list[Service]:
    """Every daemon ``down`` and ``stop_service`` know, in start order."""
    return [*services(cluster), *yarn_services(cluster)]


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    java = Path(java_home, "bin", "java") if java_home else shutil.which("java")
    if not java or not Path(java).is_file():
        raise ClusterError("java not found (set JAVA_HOME or put JDK 17 on PATH)")
    return str(java)


def _spark_home() -> Path:
    """The pyspark package of the running venv, else of the repo's .venv.

    Set explicitly as SPARK_HOME: otherwise spark-class asks whatever ``python3`` is on
    PATH to locate pyspark, and that is not the venv when this CLI runs under the system
    Python.
    """
    for venv in (Path(sys.prefix), REPO / ".venv"):
        for package in sorted(venv.glob("lib/python3*/site-packages/pyspark")):
            if (package / "bin" / "spark-class").is_file():
                return package
    raise ClusterError(
        f"pyspark not found in {sys.prefix} or {REPO / '.venv'}: pip install -r requirements.txt"
    )


def _hadoop_command(cluster: Cluster, service: Service) -> list[str]:
    """The java command line that bin/hdfs would build, minus the script."""
    classpath = os.pathsep.join([str(cluster.conf_dir), str(DIST), f"{LIB}/*"])  # DIST: webapps/
    return [
        _java(),
        f"-Xmx{service.heap}",
        *DAEMON_JVM_FLAGS,
        *JAVA17_FLAGS,
        f"-Dproc_{service.name}",
        f"-Dhadoop.log.dir={cluster.logs_dir}",
        f"-Dhadoop.log.file={service.name}.log",
        f"-Dhadoop.home.dir={DIST}",
        f"-Dhadoop.id.str={cluster.user}",
        *("-cp", classpath, service.main_class, *service.args),
    ]


def _spark_env(cluster: Cluster, service: Service, spark_home: Path) -> dict[str, str]:
    return {
        "SPARK_HOME": str(spark_home),
        "SPARK_LOCAL_IP": HOST,  # also binds the web UIs to loopback
        "SPARK_CONF_DIR": str(cluster.spark_conf_dir),  # ignore any user spark-env.sh
        "SPARK_DAEMON_MEMORY": service.heap,
        "SPARK_DAEMON_JAVA_OPTS": " ".join(DAEMON_JVM_FLAGS),
        "SPARK_LOCAL_DIRS": str(cluster.data_dir / "spark-local"),  # executors' scratch space
        # The worker puts HADOOP_CONF_DIR on executor classpaths: replication 1 there too.
        "HADOOP_CONF_DIR": str(cluster.client_conf_dir),
    }


def launch_command(cluster: Cluster, service: Service) -> tuple[list[str], dict[str, str]]:
    """argv and extra environment that start the service. Only starting needs java and
    pyspark, so ``status`` and ``down`` work even where they are missing."""
    if service.runtime == "hadoop":
        # The NodeManager's containers start `$JAVA_HOME/bin/java` (Spark's launch
        # command), JAVA_HOME taken from the NodeManager's environment.
        return _hadoop_command(cluster, service), {"JAVA_HOME": str(Path(_java()).resolve().parents[1])}
    spark_home = _spark_home()
    argv = [str(spark_home / "bin" / "spark-class"), service.main_class, *service.args]
    return argv, _spark_env(cluster, service, spark_home)


# --------------------------------------------------------------------------- processes


def _start(cluster: Cluster, service: Service) -> int:
    """Launch a daemon in its own session (it outlives the CLI), logging to logs/<name>.log."""
    argv, env = launch_command(cluster, service)
    return supervise.start(cluster, service.name, argv, {**os.environ, **env})


def _running(cluster: Cluster, service: Service) -> int | None:
    return supervise.running_pid(cluster, service.name)


# --------------------------------------------------------------------------- readiness


class Response(NamedTuple):
    status: int
    location: str | None
    body: bytes


def _http(method: str, url: str, body: bytes | None = None) -> Response:
    """One HTTP request without following redirects: WebHDFS's 307s are part of the check."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        connection.request(method, f"{parts.path}?{parts.query}", body=body)
        response = connection.getresponse()
        return Response(response.status, response.getheader("Location"), response.read())
    finally:
        connection.close()


def _webhdfs_url(cluster: Cluster, path: str, op: str, **params: str) -> str:
    query = urllib.parse.urlencode({"op": op, "user.name": cluster.user, **params})
    return f"http://{HOST}:{cluster.ports.nn_http}/webhdfs/v1{path}?{query}"


def _wait(
    cluster: Cluster,
    what: str,
    endpoint: str,
    probe: Callable[[Cluster], str | None],
    watched: Sequence[Service],
    log_of: Service,
) -> None:
    """Poll probe(cluster) (None = ready, else why not) until WAIT_TIMEOUT_S; fail fast if a
    watched daemon dies. Errors carry the endpoint and the tail of the relevant log."""
    names = [service.name for service in watched]
    supervise.wait(cluster, f"{what} at {endpoint}", lambda: probe(cluster), names, lambda: log_of.name)


def _namenode_answers(cluster: Cluster) -> str | None:
    response = _http("GET", _webhdfs_url(cluster, "/", "GETFILESTATUS"))
    return None if response.status == 200 else f"GETFILESTATUS / returned {response.status}"


def _namenode_operational(cluster: Cluster) -> str | None:
    """Safe mode off and one live DataNode, from the NameNode's JMX servlet."""
    query = "Hadoop:service=NameNode,name=FSNamesystemState"
    url = f"http://{HOST}:{cluster.ports.nn_http}/jmx?qry={query}"
    response = _http("GET", url)
    state = json.loads(response.body)["beans"][0]
    if state["FSState"] != "Operational":
        return f"FSState is {state['FSState']!r} (safe mode)"
    if state["NumLiveDataNodes"] < 1:
        return "no live DataNode registered yet"
    return None


def _webhdfs_round_trip(cluster: Cluster) -> str | None:
    """Write, read and delete a file the way WebHDFS clients do, through the DataNode
    redirect: this is what Airflow's WebHDFSHook needs, and the strongest readiness sign."""
    path = "/tmp/.lakeprep-cluster-probe"
    payload = f"probe {time.time()}".encode()
    create = _http("PUT", _webhdfs_url(cluster, path, "CREATE", overwrite="true"))
    if create.status != 307 or not create.location:
        return f"CREATE {path} answered {create.status}, not a 307 to a DataNode"
    written = _http("PUT", create.location, body=payload)
    if written.status != 201:
        return f"DataNode write to {create.location} answered {written.status}: {written.body[:300]!r}"
    opened = _http("GET", _webhdfs_url(cluster, path, "OPEN"))
    if opened.status != 307 or not opened.location:
        return f"OPEN {path} answered {opened.status}, not a 307 to a DataNode"
    read = _http("GET", opened.location)
    if read.status != 200 or read.body != payload:
        return f"DataNode read from {opened.location} answered {read.status}: {read.body[:300]!r}"
    deleted = _http("DELETE", _webhdfs_url(cluster, path, "DELETE"))
    if deleted.status != 200 or json.loads(deleted.body) != {"boolean": True}:
        return f"DELETE {path} answered {deleted.status}: {deleted.body[:300]!r}"
    return None


def _spark_master_state(cluster: Cluster) -> dict:
    url = f"http://{HOST}:{cluster.ports.spark_master_ui}/json/"
    return json.loads(_http("GET", url).body)


def _spark_master_alive(cluster: Cluster) -> str | None:
    status = _spark_master_state(cluster).get("status")
    return None if status == "ALIVE" else f"master status is {status!r}"


def _spark_worker_alive(cluster: Cluster) -> str | None:
    workers = _spark_master_state(cluster).get("workers", [])
    alive = [worker for worker in workers if worker.get("state") == "ALIVE"]
    return None if alive else f"no ALIVE worker yet ({len(workers)} known)"


def _rm_get(cluster: Cluster, path: str) -> dict:
    response = _http("GET", f"http://{HOST}:{cluster.ports.rm_http}/ws/v1/cluster/{path}")
    if response.status != 200:
        raise ValueError(f"GET /ws/v1/cluster/{path} answered {response.status}: {response.body[:300]!r}")
    return json.loads(response.body)


def _resourcemanager_active(cluster: Cluster) -> str | None:
    info = _rm_get(cluster, "info")["clusterInfo"]
    if info["state"] != "STARTED" or info["haState"] != "ACTIVE":
        return f"ResourceManager state {info['state']}, HA state {info['haState']}"
    return None


def _nodemanager_running(cluster: Cluster) -> str | None:
    """Our NodeManager registered and RUNNING (UNHEALTHY, e.g. a full disk, says why)."""
    nodes = (_rm_get(cluster, "nodes")["nodes"] or {}).get("node", [])
    # The node id carries the name the NodeManager resolves its address to (`localhost`).
    address = f"{HOST}:{cluster.ports.nm_rpc}"
    ours = [node for node in nodes if node["id"].endswith(f":{cluster.ports.nm_rpc}")]
    if not ours:
        return f"NodeManager {address} not registered yet ({len(nodes)} node(s) known)"
    if ours[0]["state"] != "RUNNING":
        return f"NodeManager {address} is {ours[0]['state']}: {ours[0].get('healthReport', '')}"
    return None


def _wait_for_yarn(cluster: Cluster, rm: Service, nm: Service, watched: Sequence[Service]) -> None:
    rm_info = f"http://{HOST}:{cluster.ports.rm_http}/ws/v1/cluster/info"
    _wait(cluster, "the ResourceManager", rm_info, _resourcemanager_active, watched, rm)
    nodes = f"http://{HOST}:{cluster.ports.rm_http}/ws/v1/cluster/nodes"
    _wait(cluster, "a RUNNING NodeManager", nodes, _nodemanager_running, watched, nm)


# --------------------------------------------------------------------------- lifecycle


def _format_if_new(cluster: Cluster, namenode: Service) -> bool:
    """Format the namespace on first use only (an empty name dir), never over data."""
    if cluster.name_dir.is_dir() and any(cluster.name_dir.iterdir()):
        return False
    # Blocks of an older namespace would make the DataNode refuse the new cluster ID.
    if cluster.datanode_dir.exists():
        shutil.rmtree(cluster.datanode_dir)
    log_path = cluster.log_file("namenode-format")
    with log_path.open("ab") as log:
        done = subprocess.run(
            [*launch_command(cluster, namenode)[0], "-format", "-nonInteractive", "-force"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cluster.state_dir,
            timeout=WAIT_TIMEOUT_S,
            check=False,
        )
    if done.returncode != 0:
        raise ClusterError(f"NameNode -format failed ({done.returncode})\n" + supervise.tail(log_path))
    return True


def _create_lake_dirs(cluster: Cluster) -> None:
    """/lake, /tmp and the user's home, writable by anyone (as a shared scratch cluster)."""
    for path, mode in (("/lake", "777"), ("/tmp", "1777"), (f"/user/{cluster.user}", "777")):
        for op, params in (("MKDIRS", {}), ("SETPERMISSION", {"permission": mode})):
            response = _http("PUT", _webhdfs_url(cluster, path, op, **params))
            if response.status != 200:
                raise ClusterError(f"WebHDFS {op} {path} answered {response.status}: {response.body!r}")


def _start_unless_running(cluster: Cluster, service: Service) -> bool:
    """Start the service unless its pid file names a live daemon; True if it started it."""
    return supervise.start_unless_running(cluster, service.name, lambda: _start(cluster, service))


def _wait_for_hdfs(
    cluster: Cluster, namenode: Service, datanode: Service, watched: Sequence[Service]
) -> None:
    """NameNode answering, then safe mode off with a live DataNode, then a real write."""
    ports = cluster.ports
    webhdfs = f"http://{HOST}:{ports.nn_http}/webhdfs/v1/"
    _wait(cluster, "the NameNode", webhdfs, _namenode_answers, watched, namenode)
    _wait(
        cluster,
        "safe mode off and a live DataNode",
        f"http://{HOST}:{ports.nn_http}/jmx",
        _namenode_operational,
        watched,
        datanode,
    )
    _wait(
        cluster,
        "a WebHDFS write/read/delete via the DataNode",
        f"{webhdfs} -> http://{HOST}:{ports.dn_http}",
        _webhdfs_round_trip,
        watched,
        datanode,
    )


def up(state_dir: str | os.PathLike[str] | None = None, *, yarn: bool = False) -> dict:
    """Start whatever is not running yet and wait until HDFS and Spark (and YARN) really serve.

    Idempotent: live daemons from the pid files are kept, so a second call only re-checks,
    and ``up(yarn=True)`` on a running cluster adds only the ResourceManager and NodeManager.
    Returns ``{"state_dir", "pids": {service: pid}, "started": [service], "seconds", "env"}``
    (``env``: ``client_env(yarn=yarn)``).
    """
    began = time.monotonic()
    cluster = cluster_config(state_dir)
    fetch()
    for folder in (cluster.logs_dir, cluster.pids_dir, cluster.data_dir):
        folder.mkdir(parents=True, exist_ok=True)
    write_configs(cluster)
    namenode, datanode, master, worker = services(cluster)
    resourcemanager, nodemanager = yarn_services(cluster)
    everything = all_services(cluster) if yarn else services(cluster)
    to_start = [service for service in everything if _running(cluster, service) is None]
    supervise.check_ports_free(cluster, {service.name: service.port for service in to_start})
    if _running(cluster, namenode) is None:
        _format_if_new(cluster, namenode)

    # Start early, wait late: JVM start-up is most of the time, so the daemons boot side
    # by side. Only the worker waits for an ALIVE master before it starts, because its
    # registration retries back off by 5-15 s.
    early = (namenode, datanode, master, *((resourcemanager, nodemanager) if yarn else ()))
    started = [service.name for service in early if _start_unless_running(cluster, service)]
    master_json = f"http://{HOST}:{cluster.ports.spark_master_ui}/json/"
    _wait(cluster, "the Spark master", master_json, _spark_master_alive, (namenode, datanode, master), master)
    if _start_unless_running(cluster, worker):
        started.append(worker.name)
    _wait_for_hdfs(cluster, namenode, datanode, everything)
    _create_lake_dirs(cluster)
    _wait(cluster, "an ALIVE Spark worker", master_json, _spark_worker_alive, everything, worker)
    if yarn:
        _wait_for_yarn(cluster, resourcemanager, nodemanager, everything)
    return {
        "state_dir": str(cluster.state_dir),
        "pids": {service.name: _running(cluster, service) for service in everything},
        "started": started,
        "seconds": round(time.monotonic() - began, 1),
        "env": client_env(cluster.state_dir, yarn=yarn),
    }


def down(state_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """Stop the daemons this state dir started (YARN's included), in reverse order; returns those stopped.

    A pid file whose process is gone or is no longer ours is just removed.
    """
    cluster = cluster_config(state_dir)
    return [service.name for service in reversed(all_services(cluster)) if _stop(cluster, service)]


def _stop(cluster: Cluster, service: Service) -> bool:
    """SIGTERM, then SIGKILL after the service's grace period; only if the pid is still ours."""
    return supervise.stop(cluster, service.name, service.stop_grace_s)


def stop_service(name: str, state_dir: str | os.PathLike[str] | None = None) -> bool:
    """Stop one daemon, e.g. the NameNode to test how clients fail; ``up()`` restarts it.

    Returns whether it was running.
    """
    cluster = cluster_config(state_dir)
    by_name = {service.name: service for service in all_services(cluster)}
    if name not in by_name:
        raise ClusterError(f"unknown service {name!r}; expected one of {sorted(by_name)}")
    return _stop(cluster, by_name[name])


def status(state_dir: str | os.PathLike[str] | None = None, *, yarn: bool = False) -> dict[str, dict]:
    """Per service (YARN's with ``yarn``): pid (None if not running), endpoint, up (ours, listening)."""
    cluster = cluster_config(state_dir)
    report = {}
    for service in all_services(cluster) if yarn else services(cluster):
        pid = _running(cluster, service)
        report[service.name] = {
            "pid": pid,
            "endpoint": service.endpoint,
            "up": pid is not None and supervise.port_open(service.port),
        }
    return report


def yarn_connection(cluster: Cluster, queue: str = "ml") -> str:
    """The Spark connection for this YARN: cluster deploy mode, a queue, the RM's web address.

    The address is what the provider's `yarn_track_via_rm_api` polls and kills through,
    and where SparkStageOperator finds the driver's log.
    """
    extra = {
        "deploy-mode": "cluster",
        "queue": queue,
        "yarn_resourcemanager_webapp_address": f"http://{HOST}:{cluster.ports.rm_http}",
    }
    return json.dumps({"conn_type": "spark", "host": "yarn", "extra": extra})


def client_env(state_dir: str | os.PathLike[str] | None = None, *, yarn: bool = False) -> dict[str, str]:
    """Environment for clients of this cluster: Airflow connections/variables, Spark, HDFS.

    With ``yarn``, Spark goes to the ResourceManager in cluster deploy mode (queue `ml`),
    with the Spark conf dir ``write_yarn_spark_conf`` writes.
    """
    cluster = cluster_config(state_dir)
    ports = cluster.ports
    webhdfs = {"conn_type": "webhdfs", "host": HOST, "port": ports.nn_http, "login": cluster.user}
    if yarn:
        return {
            "AIRFLOW_CONN_WEBHDFS_DEFAULT": json.dumps(webhdfs),
            "AIRFLOW_CONN_SPARK_DEFAULT": yarn_connection(cluster),
            "AIRFLOW_VAR_LAKEPREP_LAKE_ROOT": f"hdfs://{HOST}:{ports.nn_rpc}/lake",
            "HADOOP_CONF_DIR": str(cluster.client_conf_dir),
            "SPARK_CONF_DIR": str(cluster.client_spark_conf_dir),
            "SPARK_LOCAL_IP": HOST,
        }
    return {
        "AIRFLOW_CONN_WEBHDFS_DEFAULT": json.dumps(webhdfs),
        # SparkSubmitHook turns conn_type spark + host + port into spark://127.0.0.1:7077.
        "AIRFLOW_CONN_SPARK_DEFAULT": f"spark://{HOST}:{ports.spark_master}",
        "AIRFLOW_VAR_LAKEPREP_LAKE_ROOT": f"hdfs://{HOST}:{ports.nn_rpc}/lake",
        "HADOOP_CONF_DIR": str(cluster.client_conf_dir),
        # The driver must be reachable by the executors and bound to loopback like the rest.
        "SPARK_LOCAL_IP": HOST,
    }


# --------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("fetch", "up", "down", "status", "env"))
    parser.add_argument(
        "--yarn", action="store_true", help="up/status/env: the YARN ResourceManager and NodeManager too"
    )
    args = parser.parse_args(argv)
    command, yarn = args.command, args.yarn

    def action() -> int | None:
        if command == "fetch":
            began = time.monotonic()
            ran = fetch()
            print(f"{DIST}: {'fetched' if ran else 'already complete'} ({time.monotonic() - began:.1f} s)")
        elif command == "up":
            result = up(yarn=yarn)
            supervise.print_status(status(yarn=yarn))
            print(f"up in {result['seconds']} s; started: {', '.join(result['started']) or 'nothing'}")
            print(f'clients: eval "$(python hadoop/cluster.py env{" --yarn" if yarn else ""})"')
        elif command == "down":
            print(f"stopped: {', '.join(down()) or 'nothing was running'}")
        elif command == "status":
            return supervise.status_exit(status(yarn=yarn))
        else:
            supervise.print_exports(client_env(yarn=yarn))
        return None

    return supervise.run_command("cluster", command, action)


if __name__ == "__main__":
    sys.exit(main())
