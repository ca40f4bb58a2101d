"""lens_rl's ``sitecustomize``: ``lens-rl run`` puts this folder first on ``PYTHONPATH``, so every Python
process of the job runs it at start-up. It runs the ``sitecustomize`` that was there before (the next one on
``sys.path``) first, then weaves this process (:func:`lens_rl.frameworks._bootstrap.start`). Nothing here may
fail the process: a fault is one line on stderr, and an interpreter without lens_rl is left alone (but for
``OTEL_PYTHON_ID_GENERATOR=lens_rl``, held aside there: it names an id generator that interpreter does not have;
a Python it starts that has lens_rl takes it back).
"""

import sys


def _chain() -> None:
    import importlib.machinery
    import importlib.util
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module  # the job's own sitecustomize is the one the process knows
    spec.loader.exec_module(module)


try:
    _chain()
except Exception as exc:  # the job's own sitecustomize failed: as Python's site would, say so and go on
    print(f"Error in sitecustomize (chained by lens-rl run): {exc!r}", file=sys.stderr)

try:
    from lens_rl.frameworks import _bootstrap
except ImportError:  # an interpreter without lens_rl (another venv started by the job): not ours to weave
    _bootstrap = None  # type: ignore[assignment]
    import os

    # nor is lens_rl's id generator there: OpenTelemetry's auto-configuration would fail on the name. Held
    # aside, not lost: a Python this one starts that has lens_rl (the training interpreter) takes it back.
    if os.environ.get("OTEL_PYTHON_ID_GENERATOR", "").strip() == "lens_rl":
        os.environ["LENS_RL_HELD_ID_GENERATOR"] = os.environ.pop("OTEL_PYTHON_ID_GENERATOR")
except Exception as exc:  # a broken lens_rl in this interpreter: the job runs on, unwoven, and says why
    print(f"lens-rl run: this process is not woven: {exc!r}", file=sys.stderr)
    _bootstrap = None  # type: ignore[assignment]
if _bootstrap is not None:
    import os

    held = os.environ.pop("LENS_RL_HELD_ID_GENERATOR", None)
    if held is not None and "OTEL_PYTHON_ID_GENERATOR" not in os.environ:
        os.environ["OTEL_PYTHON_ID_GENERATOR"] = held
    _bootstrap.start()
