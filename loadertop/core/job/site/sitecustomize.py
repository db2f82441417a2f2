"""`loadertop run` puts this folder first on the job's PYTHONPATH: every Python process of the job (the launcher,
its ranks, spawned processes, workers) runs this at start-up. It installs the DataLoader hook
(loadertop.core.job.run_hook, standard library only until a loader is iterated) unless LOADERTOP_WATCH=0, then runs
the sitecustomize this one hides, if there is one. Nothing here may stop the job from starting."""

import contextlib
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _install() -> None:
    if os.environ.get("LOADERTOP_WATCH", "1").strip().lower() in ("0", "false", "no", "off"):
        return
    if importlib.util.find_spec("loadertop") is None:  # another environment's Python: loadertop's own, at the end
        home = os.environ.get("LOADERTOP_RUN_HOME")
        if not home:
            return
        sys.path.append(home)
    from loadertop.core.job.run_hook import install

    install()


def _chain() -> None:
    """The next sitecustomize on the path (the one this file hides), run as the interpreter would have."""
    from importlib.machinery import PathFinder

    rest = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    spec = PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["_loadertop_chained_sitecustomize"] = module
    spec.loader.exec_module(module)


with contextlib.suppress(Exception):  # loadertop's failure never stops the job
    _install()
_chain()
