"""Retries and backoff, in one place, on tenacity.

Three shapes cover raftsched's retry loops (the API client, the standalone supervisor, the
proposer, the materializer, the worker's lease and outcome calls, its callback runner and its
death report; the Raft core keeps no clock):

- :func:`backoff`: the wait before retry number *n* (1-based), ``initial * 2**(n-1)`` capped at
  ``maximum``; with ``jitter``, a uniform draw below that ("full jitter", so that clients that
  failed together do not retry together). For loops that do more between tries than call one
  function (the API client rotates through nodes and waits only after a full round; the
  standalone supervisor restarts a child at a time it records; the worker's loops wait on a
  stop event, or only while a lease or grace period lasts).
- :func:`until`: call a function every ``every`` seconds while it raises an error that
  ``retry_on`` accepts, for up to ``deadline`` seconds; then :class:`GaveUp` (any other error
  passes through at once).
- :func:`until_async`: :func:`until` for a coroutine function, waiting with ``asyncio.sleep``
  (the triggerer's loop), with ``on_retry(error)`` before each wait.
- :func:`poll`: call a function every ``every`` seconds until ``done(result)`` or
  ``deadline`` seconds passed; the last result either way.

tenacity's own wait strategies make the numbers (``wait_exponential``,
``wait_random_exponential``, ``wait_fixed``), so each loop that used to compute its own agrees
with the others.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import tenacity

T = TypeVar("T")

GaveUp = tenacity.RetryError  # until(): the deadline passed; .last_attempt holds the last error


def backoff(attempt: int, *, initial: float, maximum: float, jitter: bool = False) -> float:
    """Seconds to wait before retry number ``attempt`` (1 is the first retry)."""
    kind = tenacity.wait_random_exponential if jitter else tenacity.wait_exponential
    state = tenacity.RetryCallState(retry_object=None, fn=None, args=(), kwargs={})  # type: ignore[arg-type]
    state.attempt_number = max(1, attempt)
    return kind(multiplier=initial, max=maximum)(state)


def until(
    fn: Callable[[], T],
    *,
    deadline: float,
    every: float,
    retry_on: Callable[[BaseException], bool],
) -> T:
    """``fn()``'s result, calling it again after ``every`` s while it raises an error that
    ``retry_on`` accepts; :class:`GaveUp` once ``deadline`` seconds have passed."""
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_delay(deadline),
        wait=tenacity.wait_fixed(every),
        retry=tenacity.retry_if_exception(retry_on),
    )
    return retrying(fn)


async def until_async(
    fn: Callable[[], Awaitable[T]],
    *,
    deadline: float,
    every: float,
    retry_on: Callable[[BaseException], bool],
    on_retry: Callable[[BaseException], None] | None = None,
) -> T:
    """:func:`until` for ``await fn()``; ``on_retry(error)`` before each wait. An error
    ``retry_on`` refuses (``asyncio.CancelledError``: refuse it) passes through at once."""

    def before_sleep(state: tenacity.RetryCallState) -> None:
        if on_retry is not None and state.outcome is not None:
            on_retry(state.outcome.exception())  # type: ignore[arg-type]

    async def call() -> T:  # a coroutine function: tenacity awaits only those
        return await fn()

    retrying = tenacity.AsyncRetrying(
        stop=tenacity.stop_after_delay(deadline),
        wait=tenacity.wait_fixed(every),
        retry=tenacity.retry_if_exception(retry_on),
        before_sleep=before_sleep,
    )
    return await retrying(call)


def poll(fn: Callable[[], T], *, done: Callable[[T], bool], deadline: float, every: float) -> T:
    """``fn()``'s first result that is ``done``, calling it every ``every`` s; after
    ``deadline`` seconds, its last result, done or not. Errors pass through at once."""
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_delay(deadline),
        wait=tenacity.wait_fixed(every),
        retry=tenacity.retry_if_not_result(done),
        retry_error_callback=lambda state: state.outcome.result(),  # type: ignore[union-attr]
    )
    return retrying(fn)
