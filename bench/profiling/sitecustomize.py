"""Profiles every Python process of a benchmark run with pyinstrument, from interpreter start.

A benchmark puts this directory first on PYTHONPATH and sets TONY_BENCH_PYINSTRUMENT to an output
directory; the AM and the executors inherit both, so their start-up (imports included) is in the
profile without any change to the runtime. Each process writes ``<role>-<pid>.txt`` at exit.
Executors forked by the local fork server inherit the AM's profiler, so their profiles begin with
the AM's start-up, up to the fork.
"""
import atexit
import os

_out = os.environ.get("TONY_BENCH_PYINSTRUMENT")
if _out:
    try:
        from pyinstrument import Profiler
    except ImportError:  # profiling is optional; the benchmark still runs
        Profiler = None
    if Profiler is not None:
        _profiler = Profiler(interval=0.001)
        _profiler.start()

        def _save() -> None:
            _profiler.stop()
            try:
                with open("/proc/self/cmdline", "rb") as fh:
                    argv = fh.read().split(b"\0")
            except OSError:
                argv = []
            words = [a.decode(errors="replace") for a in argv]
            # A container forked by the AM's fork server has the AM's command line, and its own
            # environment (and the AM's samples from before the fork in its profile).
            if "TONY_TASK_ID" in os.environ:
                role = "executor"
            else:
                role = "am" if "tony_workflow.am.master" in words else "executor" if "tony_workflow.task.executor" in words else "other"
            if role == "other":
                return
            os.makedirs(_out, exist_ok=True)
            path = os.path.join(_out, f"{role}-{os.getpid()}.txt")
            with open(path, "w") as fh:
                fh.write(" ".join(words) + "\n")
                fh.write(_profiler.output_text(unicode=False, color=False, show_all=False))

        atexit.register(_save)
