"""Timing helpers for the chapters and benchmarks: a robust median, the machine's memory read bandwidth, and
a way to run code on one CPU thread."""
import time
from contextlib import contextmanager

import torch


def median_seconds(fn, min_total=0.3, min_runs=5):
    """Median wall time of fn(), after one warm-up call, repeated until min_total seconds and min_runs runs."""
    fn()
    times = []
    while len(times) < min_runs or sum(times) < min_total:
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def read_bandwidth(n_bytes=512 * 2**20):
    """Bytes per second this machine reads from memory, measured by summing an n_bytes fp32 tensor.

    Summing does one addition per 4 bytes read, so it is limited by how fast memory delivers the data.
    """
    x = torch.ones(n_bytes // 4)
    return n_bytes / median_seconds(lambda: x.sum())


@contextmanager
def one_thread():
    """Run the body of the ``with`` on one CPU thread, then restore the previous number of threads.

    One thread adds sums in the same order on every run, so results repeat exactly; and on a busy machine a
    small kernel on one thread is not left waiting for a second thread that the system has paused.
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def compute_rate(n=1024):
    """Floating-point operations per second this machine does in an (n, n) @ (n, n) fp32 matrix product.

    A large product does about n FLOPs per number it reads, so it is limited by arithmetic, not memory: this is
    the compute ceiling of the roofline model, as ``read_bandwidth`` is its memory ceiling.
    """
    a, b = torch.randn(n, n), torch.randn(n, n)
    return 2 * n**3 / median_seconds(lambda: a @ b)
