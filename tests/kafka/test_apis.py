"""The Kafka dispatch table: every declared API has its handler, whatever was imported.

The table used to be filled by decorators as modules were imported, so what the
front-end served depended on who had imported what (9 APIs after importing the
handlers alone, 18 after the server). It is now written out in one place.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import pytest_twisted

from rustka.kafka import admin_handlers, apis, group_handlers, handlers, messages
from rustka.kafka.messages import ApiKey
from tests.conftest import RunningBroker, start_broker


def test_every_declared_api_has_a_handler_and_every_handler_a_declaration() -> None:
    assert set(apis.HANDLERS) == set(ApiKey) == set(messages.APIS)
    for key, handler in apis.HANDLERS.items():
        modules = (
            handlers.__name__,
            group_handlers.__name__,
            admin_handlers.__name__,
            "rustka.kafka.acl_handlers",
            "rustka.kafka.sasl_handlers",
            "rustka.kafka.txn_handlers",
            "rustka.kafka.share_group_handlers",
            "rustka.kafka.consumer_group_handlers",
            "rustka.kafka.telemetry_handlers",
        )
        assert handler.__module__ in modules, key


def test_the_table_is_read_only() -> None:
    with pytest.raises(TypeError):
        apis.HANDLERS[ApiKey.PRODUCE] = handlers.fetch  # type: ignore[index]


def _fresh(code: str) -> str:
    """Run ``code`` in a new interpreter (nothing imported yet); its output."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_importing_a_handler_module_registers_nothing() -> None:
    out = _fresh(
        """
        import rustka.kafka.handlers as h, rustka.kafka.group_handlers as g
        import rustka.kafka.admin_handlers as a
        modules = (h, g, a)
        print(sorted(n for n in ("HANDLERS", "handler") if any(hasattr(m, n) for m in modules)))
        """
    )
    assert out == "[]"


def test_the_table_alone_is_the_whole_table() -> None:
    out = _fresh(
        """
        import sys
        from rustka.kafka.apis import HANDLERS
        print(len(HANDLERS), "rustka.kafka.server" in sys.modules)
        """
    )
    assert out == f"{len(ApiKey)} False"


TELEMETRY = {ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, ApiKey.PUSH_TELEMETRY}


@pytest_twisted.ensureDeferred
async def test_api_versions_lists_exactly_the_table(broker: RunningBroker, data_dir: Path) -> None:
    """The whole table, but the client-telemetry APIs only when telemetry is configured,
    as Kafka offers them only with a telemetry receiver (docs/kafka.md)."""
    factory = broker.top.kafka_factory
    advertised = [key for key, _, _ in factory.advertised_versions()]
    assert advertised == sorted(set(apis.HANDLERS) - TELEMETRY)
    await broker.stop()
    with_telemetry = await start_broker(data_dir, client_telemetry_metrics="*")
    try:
        factory = with_telemetry.top.kafka_factory
        assert [key for key, _, _ in factory.advertised_versions()] == sorted(apis.HANDLERS)
    finally:
        await with_telemetry.stop()
