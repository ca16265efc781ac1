"""The trainer imports and runs with exactly the packages the trainer image installs.

docker/trainer/Dockerfile is a plain Python base, ``pip install -r requirements-train.txt``
and ``PYTHONPATH=/opt/lakeprep/training:/opt/lakeprep/contracts``. No Docker engine is
needed here: the venv has every pinned requirement at its pin (checked first), and a
subprocess of its Python (``-I -S``: no environment variables, no ``site``, no ``.pth``
files) gets a guard in place of ``sys.meta_path``'s path finder (tests/training/image_guard.py)
that lets it import, and ``importlib.metadata`` see, only

- the standard library of the image's Python (``sys.stdlib_module_names``, less what
  was removed between this interpreter's version and the image's),
- the top-level modules of the distributions in the dependency closure of
  requirements-train.txt, resolved with ``importlib.metadata`` (environment markers and
  extras evaluated for this platform),
- what the Dockerfile's PYTHONPATH holds (training/, contracts/ of this checkout).

Importing anything else (Airflow, PySpark, pandas, ... which the venv has) is an
ImportError that names the module and requirements-train.txt; a probe for it
(``importlib.util.find_spec``) finds nothing, as in the image. In that interpreter every
module of lakeprep_train and lakeprep_contracts is imported, a model is trained by
``lakeprep_train.train`` on a real export (test_predict's raw rows -> shards ->
manifest) and scored by ``lakeprep_train.predict``.

Not covered: the image's Python is 3.12 (markers are evaluated for this one), the base
image's own pip (not allowed here) and system libraries (e.g. libhdfs for ``hdfs://``).
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
import os
import pkgutil
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.training.test_predict import write_model_inputs

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = REPO / "requirements-train.txt"
DOCKERFILE = REPO / "docker" / "trainer" / "Dockerfile"
GUARD = Path(__file__).with_name("image_guard.py")
# Where the Dockerfile's PYTHONPATH entries come from: compose mounts ./X at /opt/lakeprep/X.
IMAGE_ROOT = "/opt/lakeprep/"
# Modules that left the standard library (PEP 594, PEP 632), for an image newer than this Python.
REMOVED_FROM_STDLIB = {
    (3, 12): {"asynchat", "asyncore", "distutils", "imp", "smtpd"},
    (3, 13): {
        "aifc", "audioop", "cgi", "cgitb", "chunk", "crypt", "imghdr", "lib2to3", "mailcap",
        "msilib", "nis", "nntplib", "ossaudiodev", "pipes", "sndhdr", "spwd", "sunau",
        "telnetlib", "uu", "xdrlib",
    },
}  # fmt: skip
# Installed in the venv (for Airflow and Spark), not in the trainer image.
NOT_IN_THE_IMAGE = ("airflow", "pyspark")


def requirement_lines() -> list[Requirement]:
    requirements = []
    for number, line in enumerate(REQUIREMENTS.read_text().splitlines(), 1):
        line = re.sub(r"(^|\s)#.*", "", line).strip()
        if not line:
            continue
        assert not line.startswith("-"), (
            f"requirements-train.txt:{number}: {line!r}: options are not modelled by this test"
        )
        requirements.append(Requirement(line))
    return requirements


def dockerfile_setting(pattern: str) -> str:
    match = re.search(pattern, DOCKERFILE.read_text(), re.MULTILINE)
    assert match, f"{DOCKERFILE.relative_to(REPO)}: no line matches {pattern!r}"
    return match.group(1)


def image_python() -> tuple[int, int]:
    major, minor = dockerfile_setting(r"^ARG PYTHON_VERSION=(\d+\.\d+)").split(".")
    return int(major), int(minor)


def image_pythonpath() -> list[str]:
    """The Dockerfile's PYTHONPATH, as the folders of this checkout that compose mounts there."""
    entries = dockerfile_setting(r"PYTHONPATH=(\S+)").split(":")
    assert all(e.startswith(IMAGE_ROOT) for e in entries), entries
    return [str(REPO / e.removeprefix(IMAGE_ROOT)) for e in entries]


def dependency_closure() -> tuple[dict[str, md.Distribution], list[str]]:
    """The installed distributions pip would install for requirements-train.txt, and any missing."""
    found: dict[str, md.Distribution] = {}
    missing: list[str] = []
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(r, "requirements-train.txt") for r in requirement_lines() if _applies(r, {""})]
    while todo:
        requirement, wanted_by = todo.pop()
        name = canonicalize_name(requirement.name)
        extras = frozenset(canonicalize_name(e) for e in requirement.extras)
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        try:
            dist = md.distribution(requirement.name)
        except md.PackageNotFoundError:
            missing.append(f"{requirement} (required by {wanted_by})")
            continue
        found[name] = dist
        for raw in dist.requires or ():
            child = Requirement(raw)
            if _applies(child, {"", *extras}):
                todo.append((child, dist.metadata["Name"]))
    return found, missing


def _applies(requirement: Requirement, extras: set[str]) -> bool:
    marker = requirement.marker
    return marker is None or any(marker.evaluate({"extra": extra}) for extra in extras)


def top_level_names(dist: md.Distribution) -> set[str]:
    """Import names a distribution installs: top_level.txt, and the top of every file in RECORD."""
    names = {n.strip() for n in (dist.read_text("top_level.txt") or "").splitlines() if n.strip()}
    for file in dist.files or ():
        parts = file.parts
        if not parts or parts[0] in ("..", "__pycache__"):
            continue
        if len(parts) > 1:
            names.add(parts[0])
        elif parts[0].endswith((".py", ".pyc", ".so", ".pyd")):
            names.add(parts[0].split(".")[0])  # module.py, _ext.cpython-311-x86_64-linux-gnu.so
    return {n for n in names if n.isidentifier()}  # not foo.dist-info, numpy.libs, ...


def import_names(distributions: dict[str, md.Distribution]) -> dict[str, list[str]]:
    """Top-level import name -> the closure's distributions that install it."""
    tops: dict[str, set[str]] = {}
    for dist in distributions.values():
        for top in top_level_names(dist):
            tops.setdefault(top, set()).add(dist.metadata["Name"])
    # packages_distributions() reads the same metadata; whatever else it maps to one of these counts too.
    for top, names in md.packages_distributions().items():
        for name in names:
            if canonicalize_name(name) in distributions and top.isidentifier():
                tops.setdefault(top, set()).add(name)
    return {top: sorted(names) for top, names in tops.items()}


@pytest.fixture(scope="module")
def image() -> dict:
    """What the guard allows, and the paths the restricted interpreter searches."""
    distributions, missing = dependency_closure()
    assert not missing, "the venv lacks distributions requirements-train.txt pulls in: " + ", ".join(missing)
    packages = import_names(distributions)
    own_roots = image_pythonpath()
    own = {info.name for root in own_roots for info in pkgutil.iter_modules([root])}
    assert {"lakeprep_train", "lakeprep_contracts"} <= own, own
    stdlib = set(sys.stdlib_module_names) | set(sys.builtin_module_names)
    # sysconfig's build-time data, a stdlib module named per platform (not in stdlib_module_names).
    stdlib |= {p.stem for p in Path(sysconfig.get_paths()["stdlib"]).glob("_sysconfigdata_*.py")}
    for version, removed in REMOVED_FROM_STDLIB.items():
        if sys.version_info[:2] < version <= image_python():
            stdlib -= removed
    site_paths = list(dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib")))
    return {
        "allowed": sorted(stdlib | set(packages) | own),
        "packages": packages,
        "distributions": sorted(distributions),
        "own": sorted(own),
        "own_roots": own_roots,
        "site_paths": site_paths,
    }


def run_in_image(image: dict, code: str, tmp_path: Path, *, timeout: int = 120) -> dict:
    """Run ``code`` in the guarded interpreter; return what it put in ``result``."""
    config = tmp_path / "image_check.json"
    result_path = tmp_path / "image_check.result.json"
    config.write_text(
        json.dumps(
            {
                "allowed": image["allowed"],
                "distributions": image["distributions"],
                "own_roots": image["own_roots"],
                "site_paths": image["site_paths"],
                "code": code,
                "result": str(result_path),
            }
        )
    )
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(home),
        "TMPDIR": str(tmp_path),
        "LC_ALL": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
    }
    process = subprocess.run(
        [sys.executable, "-I", "-S", str(GUARD), str(config)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert process.returncode == 0, process.stderr[-4000:]
    result = json.loads(result_path.read_text())
    result["stderr"] = process.stderr
    not_allowed = set(result["preloaded"]) - set(image["allowed"])
    assert not not_allowed, f"imported before the guard was installed: {sorted(not_allowed)}"
    return result


def test_every_requirement_is_pinned_and_installed_at_its_pin():
    problems = []
    for requirement in requirement_lines():
        pins = [s for s in requirement.specifier if s.operator in ("==", "===")]
        if len(pins) != 1 or len(requirement.specifier) != 1 or "*" in pins[0].version:
            problems.append(f"{requirement.name}: {requirement} is not pinned with a single '=='")
            continue
        try:
            installed = md.version(requirement.name)
        except md.PackageNotFoundError:
            problems.append(f"{requirement.name}: pinned {pins[0].version}, not installed in the venv")
            continue
        if Version(installed) != Version(pins[0].version):
            problems.append(
                f"{requirement.name}: requirements-train.txt pins {pins[0].version}, the venv has {installed}"
            )
    assert not problems, "the venv is not the trainer image's package set:\n" + "\n".join(problems)


def test_the_guard_refuses_what_the_image_lacks(image, tmp_path):
    for name in NOT_IN_THE_IMAGE:
        assert importlib.util.find_spec(name) is not None, f"{name} is not in the venv: nothing to refuse"
        assert name not in image["allowed"], f"{name} is allowed: {image['packages'].get(name)}"
    code = f"""
import json, numpy, pyarrow  # the standard library and a requirement do import
result["imported"] = [numpy.__name__, pyarrow.__name__]
result["messages"] = {{}}
for name in {NOT_IN_THE_IMAGE!r}:
    try:
        __import__(name)
    except ImportError as error:
        result["messages"][name] = [type(error).__name__, str(error), error.name]
    else:
        result["messages"][name] = None
"""
    result = run_in_image(image, code, tmp_path, timeout=60)
    assert result["error"] is None, result["error"]
    assert result["imported"] == ["numpy", "pyarrow"]
    for name in NOT_IN_THE_IMAGE:
        refusal = result["messages"][name]
        assert refusal is not None, f"import {name} succeeded in the image's interpreter"
        kind, message, module = refusal
        assert kind == "ModuleNotFoundError" and module == name
        assert f"No module named {name!r}" in message and "not in requirements-train.txt" in message
    assert set(NOT_IN_THE_IMAGE) <= set(result["refused"])


def test_every_trainer_module_imports_in_the_image(image, tmp_path):
    code = """
import importlib, pkgutil, sys

def onerror(name):
    raise  # walk_packages would otherwise skip a subpackage that fails to import

modules = []
for top in ("lakeprep_train", "lakeprep_contracts"):
    package = importlib.import_module(top)
    modules.append(top)
    for info in pkgutil.walk_packages(package.__path__, top + ".", onerror=onerror):
        importlib.import_module(info.name)
        modules.append(info.name)
result["modules"] = {name: sys.modules[name].__file__ for name in modules}
result["loaded"] = sorted({name.partition(".")[0] for name in sys.modules})
"""
    result = run_in_image(image, code, tmp_path, timeout=90)
    assert result["error"] is None, f"{result['error']}\nrefused: {result['refused']}"
    modules = result["modules"]
    expected = {"lakeprep_train.train", "lakeprep_train.predict", "lakeprep_train.serving"}
    assert expected <= set(modules) and "lakeprep_train.transform" in modules
    for name, file in modules.items():
        assert any(Path(file).is_relative_to(root) for root in image["own_roots"]), (name, file)
    assert {"torch", "numpy", "pyarrow"} <= set(result["loaded"])


def test_the_trainer_trains_and_predicts_in_the_image(image, tmp_path):
    manifest, planes, raw = write_model_inputs(tmp_path / "export")
    model = tmp_path / "model"
    source = manifest.parent / "raw_validation.csv"
    predictions = tmp_path / "predictions.jsonl"
    train_argv = ["--manifest", str(manifest), "--output", str(model), "--epochs", "1", "--device", "cpu"]
    predict_argv = ["--model", str(model), "--input", str(source), "--reference", f"planes={planes}"]
    predict_argv += ["--output", str(predictions)]
    code = f"""
import torch
torch.set_num_threads(1)
from lakeprep_train import predict, train
result["train"] = train.main({train_argv!r})
result["predict"] = predict.main({predict_argv!r})
"""
    result = run_in_image(image, code, tmp_path, timeout=120)
    context = f"{result['error']}\nrefused: {result['refused']}\nstderr: {result['stderr'][-3000:]}"
    assert result["error"] is None, context
    assert result["train"] == 0 and result["predict"] == 0, context

    metrics = json.loads((model / "metrics.json").read_text())
    assert metrics["epochs"] == 1 and metrics["device"] == "cpu"
    assert metrics["validation"]["rows"] == len(raw["validation"])
    assert (model / "model.pt").exists() and (model / "transform.json").exists()
    rows = [json.loads(line) for line in predictions.read_text().splitlines()]
    assert len(rows) == len(raw["validation"])
    assert all(r["prediction"] in (0, 1) and r.get("reason") is None for r in rows), rows[:3]
