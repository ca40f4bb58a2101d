"""The one runtime: process state in one place, phases closed by token, generators and threads right.

Most tests run a small job in a subprocess against a real OTLP receiver on loopback.
"""

from __future__ import annotations

import ast
import inspect
import json
import sys
from pathlib import Path

import pytest

import lens_rl
from lens_rl import testing
from lens_rl.record import _impl
from lens_rl.record import phases as aspects
from lens_rl.testing import OTLPReceiver
from tests.conftest import by_id, driver_job, job_root, run_python

PKG = Path(lens_rl.__file__).parent


# ---------------------------------------------------------------------- structure


def test_reset_touches_no_other_modules_private_names() -> None:
    """lens_rl.testing.reset resets through the runtime's one reset(), reaching into no private name."""
    tree = ast.parse(inspect.getsource(testing.reset))
    private = [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr.startswith("_")]
    assert private == []
    imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names]
    assert "RUNTIME" in imported and all(not name.startswith("_") or name == "RUNTIME" for name in imported)


def test_every_broad_except_goes_through_the_one_boundary() -> None:
    """A broad except in lens_rl re-raises, forwards the exception, or reports it through the boundary."""
    reporters = {"internal_error", "warn_once", "_warn_once"}
    offenders = []
    for path in PKG.rglob("*.py"):
        if path.name == "_errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ExceptHandler):
                continue
            broad = node.type is None or (
                isinstance(node.type, ast.Name) and node.type.id in ("Exception", "BaseException")
            )
            if not broad:
                continue
            inner = list(ast.walk(ast.Module(body=node.body, type_ignores=[])))
            reports = any(isinstance(n, ast.Call) and getattr(n.func, "id", None) in reporters for n in inner)
            reraises = any(isinstance(n, ast.Raise) for n in inner)
            forwards = node.name is not None and any(isinstance(n, ast.Name) and n.id == node.name for n in inner)
            if not (reports or reraises or forwards):
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []


def test_the_accelerator_reads_the_flag_from_the_runtime() -> None:
    """The entry point (the C one when built) follows RUNTIME.on: off gives a lazy phase, on a real one."""
    from lens_rl._runtime import RUNTIME

    RUNTIME.mark_off()
    lazy = lens_rl.traced_phase("generation", bucket="productive", step=1)
    assert not isinstance(lazy, aspects.Phase)
    if _impl.ACCELERATED:
        assert lazy.kwargs["bucket"] is lens_rl.Bucket.PRODUCTIVE  # a canonical string arrives as its member
    with testing.recording():
        assert isinstance(lens_rl.traced_phase("generation", step=1), aspects.Phase)


# ---------------------------------------------------------------------- OTel globals


# ---------------------------------------------------------------------- threads and tokens


def test_a_shared_lazy_phase_entered_by_racing_threads_loses_nothing(receiver: OTLPReceiver) -> None:
    """A phase made while off, then entered by 8 threads at once while on, with a tiny switch interval:
    every span arrives, each reward under its own thread's generation, each generation under the job."""
    prelude = """
sys.setswitchinterval(1e-6)
lens_rl.init_telemetry_worker()                    # env says off: the runtime resolves to off
shared = traced_phase("generation", step=1)        # so this is a lazy phase
"""
    body = """
assert type(shared).__name__ == "_LazyPhase"
def work():
    for _ in range(30):
        with shared:
            with traced_phase("reward"):
                pass
for _round in range(3):
    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads: t.start()
    for t in threads: t.join()
"""
    driver_job(receiver, body, prelude=prelude)
    assert receiver.wait_for_spans(3 * 240 * 2 + 1, 20)
    spans = receiver.spans
    ids, root = by_id(spans), job_root(spans)
    gens = [s for s in spans if s["name"] == "generation"]
    rewards = [s for s in spans if s["name"] == "reward"]
    assert len(gens) == len(rewards) == 720
    assert all(g["parent_span_id"] == root["span_id"] for g in gens)  # none nested under a leaked span
    assert all(ids[r["parent_span_id"]]["name"] == "generation" for r in rewards)
    assert len({r["parent_span_id"] for r in rewards}) == 720  # exactly one reward in each generation
    assert all(g["attributes"]["rl.step"] == 1 for g in gens)


# ---------------------------------------------------------------------- generators


# ---------------------------------------------------------------------- validation and the span twin


@pytest.mark.parametrize("impl", ["python", "c"])
@pytest.mark.parametrize("state", ["off", "on"])
def test_validation_is_the_same_on_and_off(impl: str, state: str) -> None:
    """Bad names, parents and attributes raise ValueError at the call, whether telemetry is on or off."""
    if impl == "c" and not _impl.ACCELERATED:
        pytest.skip("no C accelerator built")
    tp = aspects._traced_phase_py if impl == "python" else lens_rl.traced_phase
    bad = [
        (("",), {}),
        ((None,), {"step": 1}),
        (("   ",), {"step": 1}),
        (("x",), {"parent": "abc"}),
        (("x",), {"attributes": [("a", 1)]}),
        (("x",), {"bucket": "productiv"}),
    ]
    with testing.recording() if state == "on" else _Off():
        for args, kwargs in bad:
            with pytest.raises(ValueError):
                tp(*args, **kwargs)
        with tp("fine", bucket="overhead", parent={}, attributes={"a": 1}, step=1):
            pass


class _Off:
    def __enter__(self) -> None:
        from lens_rl._runtime import RUNTIME

        RUNTIME.mark_off()

    def __exit__(self, *exc: object) -> None:
        testing.reset()


# ---------------------------------------------------------------------- one exclusive-time rule


def test_runtime_reset_serves_tests_and_forked_children(tmp_path: Path) -> None:
    """A forked child starts with a fresh runtime and writes its own file, never the parent's."""
    out = run_python(
        f"""
        import os, json, lens_rl
        lens_rl.init_telemetry_driver({{"telemetry": {{"enabled": True, "trace_dir": {str(tmp_path)!r},
                                        "metrics_enabled": False}}}}, "grpo")
        with lens_rl.traced_phase("parent_phase"):
            pass
        pid = os.fork()
        if pid == 0:
            from lens_rl._runtime import RUNTIME
            assert RUNTIME.handle is None and RUNTIME.open_phases == {{}}
            with lens_rl.traced_phase("child_phase"):
                pass
            lens_rl.shutdown_telemetry(5000)
            os._exit(0)
        os.waitpid(pid, 0)
        assert lens_rl.shutdown_telemetry(5000)
        print(json.dumps(os.getpid()))
        """
    )
    assert out.returncode == 0, out.stderr
    parent_pid = json.loads(out.stdout)
    from tests.stores import read_spans

    files = {p.name: [r["name"] for r in read_spans(p)] for p in tmp_path.rglob("spans-*.jsonl")}
    parent = next(names for name, names in files.items() if name.endswith(f"-{parent_pid}.jsonl"))
    child = next(names for name, names in files.items() if not name.endswith(f"-{parent_pid}.jsonl"))
    assert "child_phase" not in parent and child == ["child_phase"]


def test_reset_hooks_are_told_whether_the_process_was_forked() -> None:
    """Reset hooks run at every reset, told whether it is a forked child's: the runtime's one fork hook runs them."""
    out = run_python(
        """
        import os
        from lens_rl._runtime import RUNTIME
        seen = []
        RUNTIME.reset_hooks.append(seen.append)
        RUNTIME.reset()
        pid = os.fork()
        if pid == 0:
            os._exit(0 if seen == [False, True] else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0 and seen == [False], seen
        """
    )
    assert out.returncode == 0, out.stderr


if sys.platform == "win32":  # pragma: no cover
    pytestmark = pytest.mark.skip("fork-based tests")
