"""Timing helpers for the chapters and benchmarks: a robust median, the best of several runs, the best of several
variants timed in turns (to compare them on a busy machine), the machine's two ceilings (memory read bandwidth and
the compute rate of a matrix product), and a way to run code on n CPU threads."""
import statistics
import time
from contextlib import contextmanager

import torch

from ..validation import require_positive


def _run_times(fn, enough):
    """Wall times of fn() after one warm-up call, timed until ``enough(times)`` holds."""
    fn()
    times = []
    while not enough(times):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def median_seconds(fn, min_total=0.3, min_runs=5):
    """Median wall time of fn(), after one warm-up call, repeated until min_total seconds and min_runs runs."""
    times = sorted(_run_times(fn, lambda t: len(t) >= min_runs and sum(t) >= min_total))
    return times[len(times) // 2]


def best_seconds(fn, runs=7):
    """The fastest of ``runs`` timed calls of fn(), after one warm-up call: what the machine can do at best, for a
    ceiling (a median would count the moments when the system lends the core to someone else)."""
    return min(_run_times(fn, lambda t: len(t) >= runs))


def interleaved_best_seconds(fns, rounds=5, runs=1):
    """The fastest time of each callable in ``fns`` (a dict, name -> fn), the fns timed in turns: {name: seconds}.

    After one warm-up call of each, every round times each fn ``runs`` times, one fn after the other, ``rounds``
    rounds over. Compare fns by these times, not by times taken one fn after the other: a busy spell of the
    machine (another program, the system lending the core elsewhere) then lands on every fn alike instead of on
    whichever one was being timed, and each fn's fastest time is what it does when nothing disturbs it.
    """
    for fn in fns.values():
        fn()
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, fn in fns.items():
            for _ in range(runs):
                start = time.perf_counter()
                fn()
                best[name] = min(best[name], time.perf_counter() - start)
    return best


def median_added_seconds(base, more, pairs=9):
    """How many seconds longer ``more()`` takes than ``base()``: the median of ``pairs`` differences, each of the two
    timed back to back (after one warm-up call of each).

    A busy spell of the machine then spoils one pair, not the estimate, as it would with the difference of two times
    measured apart; and a difference of two fastest times is a difference of two lucky runs.
    """
    require_positive(pairs=pairs)
    base(), more()
    differences = []
    for _ in range(pairs):
        start = time.perf_counter()
        base()
        middle = time.perf_counter()
        more()
        differences.append((time.perf_counter() - middle) - (middle - start))
    return statistics.median(differences)


def read_bandwidth(n_bytes=512 * 2**20):
    """Bytes per second this machine reads from memory, measured by summing an n_bytes fp32 tensor (best of 7).

    Summing does one addition per 4 bytes read, so it is limited by how fast memory delivers the data.
    """
    x = torch.ones(n_bytes // 4)
    return n_bytes / best_seconds(lambda: x.sum())


@contextmanager
def threads(n):
    """Run the body of the ``with`` on ``n`` CPU threads, then restore the previous number of threads."""
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def one_thread():
    """``with one_thread():`` runs its body on one CPU thread, then restores the previous number.

    One thread adds sums in the same order on every run, so results repeat exactly; and on a busy machine a
    small kernel on one thread is not left waiting for a second thread that the system has paused.
    """
    return threads(1)


def compute_rate(n=1024):
    """Floating-point operations per second this machine does in an (n, n) @ (n, n) fp32 matrix product (best of 7).

    A large product does about n FLOPs per number it reads, so it is limited by arithmetic, not memory: this is
    the compute ceiling of the roofline model, as ``read_bandwidth`` is its memory ceiling.
    """
    a, b = torch.randn(n, n), torch.randn(n, n)
    return 2 * n**3 / best_seconds(lambda: a @ b)


def peak_memory_bytes():
    """The most memory this process has held at once so far (its peak resident set), in bytes; None where the
    platform does not say.

    Linux: ``VmHWM`` of /proc/self/status, the peak of this program alone (``getrusage``'s ``ru_maxrss`` would also
    count the process that started it, such as a large test run that launched this kernel). macOS: ``ru_maxrss``
    (bytes). Windows: ``psutil``'s peak working set.
    """
    import sys

    status = "/proc/self/status"
    if sys.platform.startswith("linux"):
        try:
            with open(status) as lines:
                for line in lines:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024  # reported in kB
        except OSError:
            return None
        return None
    try:
        import resource
    except ImportError:  # Windows
        try:
            import psutil
        except ImportError:
            return None
        return getattr(psutil.Process().memory_info(), "peak_wset", None)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # macOS: bytes
