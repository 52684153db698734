"""The JSON Schema of the engine document routers and dashboards read: one engine as ``ps --json``
lists it, the agent's ``/v1/engines`` serves it and ``watch --json`` carries it (see
:func:`enginespec.scanning.scanner.engine_document`), generated from the public models so that it
cannot drift from them. ``schema/engine-document.schema.json`` in the repository is this schema,
checked against the models by the test suite; a router validates what it reads against it.
Regenerate it with ``python -m enginespec.fleet.documentschema > schema/engine-document.schema.json``.

Every reading in the document says when it was made: ``health.checked_at``, ``load.read_at``
(and the latency window's ``window_start``/``window_end``), ``models.read_at``, each a Unix time,
so a reader knows the age of each figure.
"""

from __future__ import annotations

import json
from typing import Any

from enginespec.gpus.energy import CpuEnergy
from enginespec.health.load import EngineLoad
from enginespec.health.servedmodels import ServedModels
from enginespec.healthrecord import Health
from enginespec.process.record import EngineProcess

#: The schema's identity (its ``$id``).
SCHEMA_ID = "urn:enginespec:engine-document"


class EngineDocument(EngineProcess):
    """An engine as its document gives it: the process, and the readings made of it (each
    ``None`` where not read; ``ps`` reads health by default, load with ``--load``, what it
    serves with ``--models``). Only for the schema: documents are made by ``engine_document``."""

    health: Health | None = None
    load: EngineLoad | None = None
    models: ServedModels | None = None
    cpu_energy: CpuEnergy | None = None


def engine_document_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one engine document, as serialised."""
    schema = EngineDocument.model_json_schema(mode="serialization")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        **schema,
    }


def schema_text() -> str:
    """The schema as the repository's file holds it (sorted keys, two-space indents, a final
    newline), so that a regenerated file differs only where the models did."""
    return json.dumps(engine_document_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    print(schema_text(), end="")
