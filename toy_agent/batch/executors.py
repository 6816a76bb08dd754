"""Where batch tasks run: threads on this machine, or Ray tasks on a cluster.

An executor is one class: a subclass of Executor with its `name` is registered by that name,
and `--executor`'s choices and help, and `run_batch`'s `executor`, come from EXECUTORS. This
module imports the task runner only when an executor is built, so the command line can list
the choices without loading the agent.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from toy_agent.batch.tasks import BatchError, Task
from toy_agent.providers import PROVIDERS

if TYPE_CHECKING:
    from toy_agent.settings import RunSettings

INSTALL_RAY = 'pip install "toy-agent[ray]"'

EXECUTORS: dict[str, type[Executor]] = {}  # --executor NAME -> its class, in --help's order


class Executor:
    """Where tasks run, built as `cls(settings, scratch, workers, address)` before the first
    task. `submit` starts a task, `finished` returns the (handle, result) pairs done, waiting
    up to `timeout` for the first (it may return none sooner, when a running task's step
    changed), `cancel` stops the given ones, `steps` says the step each running task's agent
    is at, `close` releases the engine."""

    name: ClassVar[str] = ""  # its --executor name: a subclass with one is registered
    summary: ClassVar[str] = ""  # what --help says of it
    # Tasks run on this machine: its sandbox and MCP servers are checked once before the
    # batch (else only the model settings are, here).
    runs_here: ClassVar[bool] = False
    takes_address: ClassVar[bool] = False  # it reaches a cluster at `address` (--ray-address)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.name:
            EXECUTORS[cls.name] = cls

    def __init__(self, settings: RunSettings, scratch: Path, workers: int,
                 address: str | None = None):  # fmt: skip
        raise NotImplementedError

    def submit(self, task: Task) -> Any:
        raise NotImplementedError

    def finished(self, handles: Sequence[Any], timeout: float) -> list[tuple[Any, dict[str, Any]]]:
        raise NotImplementedError

    def cancel(self, handles: Sequence[Any]) -> None:
        raise NotImplementedError

    def steps(self) -> dict[str, int]:
        return {}  # not known here (a task on another machine)

    def close(self) -> None:
        pass


class LocalExecutor(Executor):
    """Threads: tasks spend their time waiting on the LLM, so threads scale with --workers."""

    name, summary, runs_here = "local", "local threads", True

    def __init__(self, settings: RunSettings, scratch: Path, workers: int,
                 address: str | None = None):  # fmt: skip
        from toy_agent.batch.worker import StopSignal

        self._settings, self._scratch, self._stop = settings, scratch, StopSignal()
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, "toy-agent-task")

    def submit(self, task: Task) -> concurrent.futures.Future[dict[str, Any]]:
        from toy_agent.batch.worker import run_task

        future = self._pool.submit(run_task, task, self._settings, self._scratch, self._stop)
        future.add_done_callback(lambda _: self._stop.changed.set())
        return future

    def finished(
        self, handles: Sequence[concurrent.futures.Future[dict[str, Any]]], timeout: float
    ) -> list[tuple[Any, dict[str, Any]]]:
        """Returns at once when a task finishes or a running agent moves on a step."""
        if handles and not any(future.done() for future in handles):
            self._stop.changed.wait(timeout)
        self._stop.changed.clear()  # before looking: a task done after this sets it again
        return [(future, future.result()) for future in handles if future.done()]

    def cancel(self, handles: Sequence[Any]) -> None:
        self._stop.set()  # every task on this machine: the batch is stopping

    def steps(self) -> dict[str, int]:
        """The step each running task's agent is at."""
        return dict(self._stop.steps)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class RayExecutor(Executor):
    """Each task is a Ray task on an existing cluster (`address`, or RAY_ADDRESS), or on a local
    Ray instance started here and stopped in close(). Workers get the provider's key and base
    URL as an argument (see Credentials) and prepare their own copy; the result comes back."""

    name, summary, takes_address = "ray", "Ray tasks on a cluster", True

    def __init__(self, settings: RunSettings, scratch: Path, workers: int,
                 address: str | None = None):  # fmt: skip
        from toy_agent.batch.worker import Credentials, run_task

        try:
            import ray
        except ImportError:
            raise BatchError(f"--executor ray needs the ray package: {INSTALL_RAY}") from None
        except Exception as exc:  # a broken install: a grpc or protobuf mismatch is common
            raise BatchError(f"--executor ray: importing ray failed ({_one_line(exc)}); "
                             f"reinstall it: {INSTALL_RAY}") from None  # fmt: skip
        self._ray = ray
        self._settings, self._scratch = settings, scratch
        cluster = address or os.environ.get("RAY_ADDRESS")
        self._started_here = not ray.is_initialized()
        try:
            if self._started_here and cluster:
                ray.init(address=cluster, logging_level=logging.WARNING)
            elif self._started_here:
                ray.init(address="local", num_cpus=workers, include_dashboard=False,
                         logging_level=logging.WARNING)  # fmt: skip
        except Exception as exc:  # ConnectionError, TimeoutError, RuntimeError, ray's own
            where = f"the Ray cluster at {cluster}" if cluster else "a local Ray instance"
            message = f"--executor ray: could not start or reach {where} ({_one_line(exc)})"
            raise BatchError(f"{message}; check --ray-address or RAY_ADDRESS") from None
        self._credentials = Credentials(provider_environment(settings))
        self._runtime_env: dict[str, Any] = {}
        if cluster:  # the workers may not have toy_agent (this version of it) installed
            self._runtime_env["py_modules"] = [str(Path(__file__).resolve().parents[1])]
        self._remote = ray.remote(num_cpus=1, max_retries=0)(run_task)
        self._ids: dict[Any, str] = {}

    def submit(self, task: Task) -> Any:
        options = self._remote.options(runtime_env=self._runtime_env)
        ref = options.remote(
            task, self._settings, str(self._scratch), credentials=self._credentials
        )
        self._ids[ref] = task.id
        return ref

    def finished(self, handles: Sequence[Any], timeout: float) -> list[tuple[Any, dict[str, Any]]]:
        ray = self._ray
        ready, rest = ray.wait(list(handles), num_returns=1, timeout=timeout)
        if ready and rest:
            ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
        results: list[tuple[Any, dict[str, Any]]] = []
        for ref in ready:
            task_id = self._ids.pop(ref)
            try:
                results.append((ref, ray.get(ref)))
            except ray.exceptions.RayTaskError:
                raise  # a bug in run_task: it raises, as it would on a thread
            except ray.exceptions.RayError as exc:  # the worker or its node died, or cancelled
                from toy_agent.batch.worker import failed_result

                error = f"the Ray task failed: {type(exc).__name__}: {exc}"
                results.append((ref, failed_result(task_id, error)))
        return results

    def cancel(self, handles: Sequence[Any]) -> None:
        for ref in handles:
            with contextlib.suppress(Exception):
                self._ray.cancel(ref)

    def steps(self) -> dict[str, int]:
        return {}  # a Ray task's agent runs on another machine: its step is not known here

    def close(self) -> None:
        if self._started_here:
            self._ray.shutdown()


def _one_line(exc: BaseException) -> str:
    """`Type: the last line of the message`, for an error from a library we do not control."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[-1].strip()}" if lines else type(exc).__name__


def provider_environment(settings: RunSettings) -> dict[str, str]:
    """The key, base URL and API version variables a worker's client reads, from this
    environment."""
    from toy_agent.llm import resolve_settings

    model = settings.llm
    row = PROVIDERS.get(model.provider)
    if model.make_llm is not None or row is None:
        return {}
    key, url = resolve_settings(model.provider, None, model.base_url, os.environ)
    variables = {row.key_variables[0]: key, row.base_url_variable: url}
    if row.api_version_variable and os.environ.get(row.api_version_variable):
        variables[row.api_version_variable] = os.environ[row.api_version_variable]
    return variables
