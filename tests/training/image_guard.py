"""Run code in an interpreter that can import only what the trainer image has.

Not a test module: ``test_trainer_image.py`` starts it as
``python -I -S tests/training/image_guard.py CONFIG.json`` (isolated, no ``site``, so no
``.pth`` file of the venv runs, e.g. its editable install of the whole checkout), and
reads back the JSON it writes to ``config["result"]``. Only the standard library is used
here, so the guard is installed before anything else is imported.

CONFIG: ``allowed`` (top-level import names: the image's standard library, the
distributions requirements-train.txt installs, the packages on its PYTHONPATH),
``distributions`` (those distributions' normalized names, all importlib.metadata sees),
``own_roots`` (that PYTHONPATH: training/, contracts/), ``site_paths`` (where the venv's
distributions are), ``code`` (run with ``guard`` and ``result`` in its namespace; it
fills ``result``), ``result`` (the file to write).
"""

import json
import re
import sys
import traceback
from importlib.machinery import PathFinder
from importlib.metadata import DistributionFinder

REFUSAL = (
    "No module named {top!r} (importing {fullname!r}) in the trainer image: not in "
    "requirements-train.txt (nor needed by what is), the standard library or the image's "
    "PYTHONPATH (docker/trainer/Dockerfile)"
)


class ImageGuard:
    """``sys.meta_path``'s path finder, restricted to the allowed top-level names.

    It takes the place of ``importlib.machinery.PathFinder`` (the built-in and frozen
    finders before it hold only standard modules). A name not allowed is not found: an
    import of it raises ModuleNotFoundError saying why, while a probe
    (``importlib.util.find_spec``, as torch and jsonschema use for optional packages)
    gets None, as it would in the image.
    """

    def __init__(self, allowed, distributions):
        self.allowed = frozenset(allowed)
        self.distributions = frozenset(distributions)  # normalized names (PEP 503)
        self.refused = []  # imported, and refused
        self.probed = []  # looked for with find_spec, and not found

    def find_spec(self, fullname, path=None, target=None):
        top = fullname.partition(".")[0]
        if top in self.allowed:
            return PathFinder.find_spec(fullname, path, target)
        # find_spec <- importlib._bootstrap._find_spec <- _find_and_load_unlocked for an import
        if sys._getframe(2).f_code.co_name != "_find_and_load_unlocked":
            if fullname not in self.probed:
                self.probed.append(fullname)
            return None
        if fullname not in self.refused:
            self.refused.append(fullname)
        raise ModuleNotFoundError(REFUSAL.format(top=top, fullname=fullname), name=fullname)

    def find_distributions(self, context=None):
        """importlib.metadata sees only the distributions the image installs."""
        for dist in PathFinder.find_distributions(context or DistributionFinder.Context()):
            if re.sub(r"[-_.]+", "-", dist.metadata["Name"] or "").lower() in self.distributions:
                yield dist

    def invalidate_caches(self):
        PathFinder.invalidate_caches()


def main(config_path):
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    guard = ImageGuard(config["allowed"], config["distributions"])
    assert PathFinder in sys.meta_path, sys.meta_path
    sys.meta_path[:] = [guard if finder is PathFinder else finder for finder in sys.meta_path]
    # PYTHONPATH first, as in the image; then the standard library; then site-packages.
    sys.path[:] = [*config["own_roots"], *sys.path, *config["site_paths"]]
    sys.path_importer_cache.clear()
    result = {"preloaded": sorted({m.partition(".")[0] for m in sys.modules} - {"__main__"})}
    try:
        exec(compile(config["code"], "<image check>", "exec"), {"guard": guard, "result": result})
        result["error"] = None
    except BaseException:  # noqa: B036 - a SystemExit or a failed import is reported, not raised
        result["error"] = traceback.format_exc()
    result["refused"] = guard.refused
    result["probed"] = guard.probed
    result["meta_path"] = [repr(finder) for finder in sys.meta_path]
    with open(config["result"], "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
