"""tests/cpu_seconds.py, through which make test runs pytest: the CPU of a command and of every
process it started, those whose parent left before them included."""

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

WRAPPER = str(Path(__file__).with_name("cpu_seconds.py"))

# A child that spins for a CPU second while its parent has already left, orphaned; the command
# exits 3 at once.
COMMAND = textwrap.dedent(
    """
    import subprocess, sys
    spin = "import time\\nend = time.process_time() + 1.0\\nwhile time.process_time() < end: pass"
    start = f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {spin!r}])"
    subprocess.run([sys.executable, "-c", start])  # it has left; its child spins on
    sys.exit(3)
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a subreaper is Linux's")
def test_the_cpu_of_every_process_is_counted_and_the_exit_status_kept():
    done = subprocess.run([sys.executable, WRAPPER, sys.executable, "-c", COMMAND], capture_output=True, text=True)
    assert done.returncode == 3, done.stderr
    (line,) = done.stdout.splitlines()
    found = re.fullmatch(
        r"cpu: ([\d.]+) s \(user [\d.]+ s, system [\d.]+ s\) in [\d.]+ s; "
        r"1-minute load average [\d.]+ on average, [\d.]+ at most",
        line,
    )
    assert found, line
    assert float(found.group(1)) >= 1.0  # the orphan's second, counted once it ended


def test_without_a_command_it_says_how_to_use_it():
    done = subprocess.run([sys.executable, WRAPPER], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.startswith("``python tests/cpu_seconds.py COMMAND")
