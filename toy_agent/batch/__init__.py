"""Batch runs: a task file (or SWE-bench instances) run in private copies, on threads here or
on a Ray cluster, into an output folder (results.jsonl, patches, predictions, trajectories).

An outer layer: it builds runs with toy_agent.build like a single run does, and nothing in
the core imports it. Public names load on first use, like the package's own.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toy_agent.batch.driver import (
        BatchInterrupted,
        BatchSummary,
        ResultsFolder,
        run_batch,
    )
    from toy_agent.batch.executors import EXECUTORS, Executor
    from toy_agent.batch.tasks import BatchError, Task, load_tasks
    from toy_agent.settings import RunSettings

_EXPORTS = {
    "run_batch": "toy_agent.batch.driver",
    "BatchSummary": "toy_agent.batch.driver",
    "BatchInterrupted": "toy_agent.batch.driver",
    "ResultsFolder": "toy_agent.batch.driver",
    "BatchError": "toy_agent.batch.tasks",
    "Task": "toy_agent.batch.tasks",
    "load_tasks": "toy_agent.batch.tasks",
    "Executor": "toy_agent.batch.executors",
    "EXECUTORS": "toy_agent.batch.executors",
    "RunSettings": "toy_agent.settings",
}
__all__ = [
    "EXECUTORS",
    "BatchError",
    "BatchInterrupted",
    "BatchSummary",
    "Executor",
    "ResultsFolder",
    "RunSettings",
    "Task",
    "load_tasks",
    "run_batch",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'toy_agent.batch' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
