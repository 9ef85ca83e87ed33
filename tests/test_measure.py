"""The timing helpers return sensible quantities (their values are not asserted beyond that)."""
from attention_book.kv_cache import kv_cache_bytes_per_token
import pytest
import torch
from attention_book.experiments.measure import best_seconds, median_seconds, one_thread, read_bandwidth, threads


def test_median_seconds_runs_enough_times():
    calls = []
    seconds = median_seconds(lambda: calls.append(1), min_total=0.0, min_runs=5)
    assert len(calls) == 6 and seconds >= 0  # one warm-up and five timed runs


def test_read_bandwidth_is_positive():
    assert read_bandwidth(n_bytes=8 * 2**20) > 0


def test_cache_bytes_per_token_matches_published_sizes():
    assert kv_cache_bytes_per_token(32, 32, 128, 2) == 524_288  # Llama 2 7B, fp16: 512 KiB
    assert kv_cache_bytes_per_token(80, 8, 128, 2) == 320 * 2**10  # Llama 2 70B, fp16: 320 KiB
    assert kv_cache_bytes_per_token(32, 8, 128, 2) == 128 * 2**10  # Llama 3 8B, fp16: 128 KiB


def test_one_thread_restores_the_number_of_threads():
    before = torch.get_num_threads()
    with one_thread():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_compute_rate_is_positive_and_finite():
    from attention_book.experiments.measure import compute_rate
    rate = compute_rate(n=64)
    assert 0 < rate < float("inf")


def test_best_seconds_takes_the_fastest_run():
    calls = []
    assert best_seconds(lambda: calls.append(1), runs=3) >= 0 and len(calls) == 4  # a warm-up and three runs


def test_threads_restores_the_number_of_threads():
    before = torch.get_num_threads()
    with threads(2):
        assert torch.get_num_threads() == 2
    assert torch.get_num_threads() == before


PEAK_AFTER_A_FREED_ALLOCATION = """
import torch
from attention_book.experiments.measure import peak_memory_bytes
before = peak_memory_bytes()
x = torch.ones(256 * 2**20 // 4)  # 256 MiB, touched
del x  # freed: the resident set falls back, its peak does not
print(before, peak_memory_bytes())
"""


def test_peak_memory_counts_a_freed_allocation():
    """In a fresh interpreter, a 256 MiB tensor allocated and freed raises the reported peak by about 256 MiB: the
    peak of this program, not its current resident set (which has fallen back) nor its parent's (this test run's)."""
    import subprocess
    import sys

    child = subprocess.run([sys.executable, "-c", PEAK_AFTER_A_FREED_ALLOCATION], capture_output=True, text=True,
                           check=True)
    before, after = child.stdout.split()
    if "None" in (before, after) and not sys.platform.startswith("linux"):
        pytest.skip("this platform reports no peak (Windows without psutil)")
    assert 240 * 2**20 <= int(after) - int(before) <= 320 * 2**20, child.stdout


def test_peak_memory_is_this_programs_own():
    """A child started by a process that once held a lot reports its own peak, not its parent's."""
    import subprocess
    import sys

    from attention_book.experiments.measure import peak_memory_bytes

    big = torch.ones(768 * 2**20 // 4)  # 768 MiB in this process
    child = subprocess.run([sys.executable, "-c", "from attention_book.experiments.measure import peak_memory_bytes;"
                            "print(peak_memory_bytes())"], capture_output=True, text=True, check=True)
    reported = child.stdout.strip()
    if sys.platform.startswith("linux"):
        assert int(reported) < big.nbytes  # a bare interpreter with torch imported holds less than 768 MiB
    assert peak_memory_bytes() is None or peak_memory_bytes() > big.nbytes
