"""Run nbval over the chapters (and their student versions) under other CPUs' numerics.

    python scripts/numerics.py                  # the whole matrix, book/ and student/ (make test-numerics)
    python scripts/numerics.py --book default-1 # one configuration, the chapters only
    python scripts/numerics.py --list           # the configurations this CPU can run

PyTorch picks its CPU kernels by instruction set (ATEN_CPU_CAPABILITY) and MKL picks its own code path
(MKL_CBWR), so another reader's CPU sums floats in another order. Forcing those choices, and the number of
threads, imitates other machines on this one. A stored output that changes under any of them is not the same on
every reader's machine: print it with NBVAL_IGNORE_OUTPUT and assert the claim about it instead.
Exits 1 if any configuration fails; prints each one's time.
"""
import os
import pathlib
import subprocess
import sys
import time

from book import ROOT


def cpu_flags() -> set[str]:
    try:
        text = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return set(line.split(":", 1)[-1].split())


def configurations() -> dict[str, dict[str, str]]:
    """Name -> environment. ``default`` runs everywhere; ``avx2`` and ``avx512`` only where the CPU has them."""
    flags = cpu_flags()
    sets = [("default", "COMPATIBLE")]
    if "avx2" in flags:
        sets.append(("avx2", "AVX2"))
    found = {}
    for capability, cbwr in sets:
        for threads in (1, 2):
            found[f"{capability}-{threads}"] = {"ATEN_CPU_CAPABILITY": capability, "MKL_CBWR": cbwr,
                                               "OMP_NUM_THREADS": str(threads)}
    if "avx512f" in flags:
        found["avx512-2"] = {"ATEN_CPU_CAPABILITY": "avx512", "MKL_CBWR": "AVX512", "OMP_NUM_THREADS": "2"}
    return found


def run(name: str, env: dict[str, str], paths: list[str]) -> tuple[int, float]:
    print(f"== numerics {name}: {' '.join(f'{k}={v}' for k, v in env.items())}", flush=True)
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-o", "testpaths=", *paths],
                            cwd=ROOT, env={**os.environ, **env})
    return result.returncode, time.perf_counter() - start


def main(argv: list[str]) -> int:
    available = configurations()
    if "--list" in argv:
        for name, env in available.items():
            print(name, " ".join(f"{k}={v}" for k, v in env.items()))
        return 0
    names = [a for a in argv if not a.startswith("-")] or list(available)
    unknown = [n for n in names if n not in available]
    if unknown:
        print(f"unknown or unsupported on this CPU: {', '.join(unknown)}; choose from {', '.join(available)}")
        return 2
    paths = ["book"] if "--book" in argv else ["book", "student"]
    results = {name: run(name, available[name], paths) for name in names}
    print(f"\nnumerics matrix (nbval over {' and '.join(p + '/' for p in paths)}):")
    for name, (code, seconds) in results.items():
        print(f"  {name:<10} {'passed' if code == 0 else 'FAILED':<7} {seconds:6.0f} s")
    return 0 if all(code == 0 for code, _ in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
