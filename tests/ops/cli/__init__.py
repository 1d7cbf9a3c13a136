"""Tests of the `rustka` command families, one file per module of rustka/ops/cli/.

Each runs the console script as a subprocess against an in-process broker; the
CLI runs in a thread (deferToThread) so the reactor keeps serving the broker
while the subprocess talks to it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from twisted.internet.threads import deferToThread

from tests.conftest import RunningBroker

RUSTKA = str(Path(sys.executable).parent / "rustka")


async def cli(
    broker: RunningBroker, *args: str, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `rustka COMMAND --broker ADDR ARGS...` without blocking the reactor."""
    argv = [RUSTKA, args[0], "--broker", broker.address, *args[1:]]
    result: subprocess.CompletedProcess[str] = await deferToThread(
        subprocess.run, argv, capture_output=True, text=True, timeout=60, input=input
    )
    return result


async def ok(broker: RunningBroker, *args: str, input: str | None = None) -> str:
    result = await cli(broker, *args, input=input)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.stdout
