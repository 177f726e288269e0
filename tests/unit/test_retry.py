"""raftsched.retry: the one backoff formula and the two retry loops, on tenacity."""

from __future__ import annotations

import pytest

from raftsched import retry
from raftsched.standalone.supervisor import RestartPolicy


def test_backoff_doubles_from_initial_and_is_capped() -> None:
    delays = [retry.backoff(n, initial=0.5, maximum=5.0) for n in range(1, 7)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert retry.backoff(0, initial=0.5, maximum=5.0) == 0.5  # before any failure: initial


def test_full_jitter_draws_below_the_same_cap() -> None:
    for attempt in range(1, 8):
        cap = min(1.0, 0.05 * 2 ** (attempt - 1))
        draws = [retry.backoff(attempt, initial=0.05, maximum=1.0, jitter=True) for _ in range(50)]
        assert all(0 <= d <= cap for d in draws)
        assert len(set(draws)) > 1  # random, so clients that failed together spread out


def test_the_standalone_restart_policy_is_that_backoff() -> None:
    policy = RestartPolicy(backoff_initial=1.0, backoff_max=30.0)
    assert [policy.backoff(n) for n in (1, 2, 3, 5, 6, 9)] == [1, 2, 4, 16, 30, 30]


class Flaky(Exception):
    pass


def test_until_retries_the_accepted_errors_and_returns_the_result() -> None:
    calls = []

    def fn() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise Flaky()
        return "ok"

    got = retry.until(fn, deadline=30, every=0.01, retry_on=lambda e: isinstance(e, Flaky))
    assert got == "ok" and len(calls) == 3


def test_until_passes_any_other_error_through_at_once() -> None:
    calls = []

    def fn() -> None:
        calls.append(1)
        raise KeyError("x")

    with pytest.raises(KeyError):
        retry.until(fn, deadline=30, every=0.01, retry_on=lambda e: isinstance(e, Flaky))
    assert len(calls) == 1


def test_until_gives_up_after_its_deadline() -> None:
    def fn() -> None:
        raise Flaky()

    with pytest.raises(retry.GaveUp) as caught:
        retry.until(fn, deadline=0.05, every=0.01, retry_on=lambda e: isinstance(e, Flaky))
    assert isinstance(caught.value.last_attempt.exception(), Flaky)


def test_poll_returns_the_first_done_result_or_the_last_one() -> None:
    answers = iter(["refused", "refused", "SUCCESS", "never"])
    got = retry.poll(lambda: next(answers), done=lambda a: a == "SUCCESS", deadline=30, every=0.01)
    assert got == "SUCCESS"
    calls = []

    def refused() -> str:
        calls.append(1)
        return f"refused {len(calls)}"

    last = retry.poll(refused, done=lambda a: False, deadline=0.05, every=0.01)
    assert last == f"refused {len(calls)}" and len(calls) >= 2


def _doubling(initial: float, maximum: float, count: int) -> list[float]:
    """The hand-written loops retry.backoff replaced: start at initial, double, cap."""
    out, delay = [], initial
    for _ in range(count):
        out.append(delay)
        delay = min(maximum, delay * 2)
    return out


@pytest.mark.parametrize(
    ("where", "initial", "maximum"),
    [
        ("proposer: immediate refusals", 0.02, 0.5),
        ("worker and callback runner: lease calls", 0.5, 5.0),
        ("worker and callback runner: outcome reports", 0.2, 5.0),
        ("the death report (_last_words)", 0.1, 1.0),
    ],
)
def test_each_converted_loop_waits_as_it_did(where: str, initial: float, maximum: float) -> None:
    delays = [retry.backoff(n, initial=initial, maximum=maximum) for n in range(1, 12)]
    assert delays == _doubling(initial, maximum, 11), where


def test_the_materializer_waits_as_it_did() -> None:
    from raftsched.cluster.materializer_driver import BACKOFF_MAX, BACKOFF_MIN, MaterializerDriver

    delays = [MaterializerDriver._backoff(n) for n in range(1, 12)]
    assert delays == _doubling(BACKOFF_MIN, BACKOFF_MAX, 11)


def test_until_async_retries_reports_each_retry_and_gives_up() -> None:
    import asyncio

    calls: list[int] = []
    seen: list[str] = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise Flaky(f"try {len(calls)}")
        return "ok"

    async def always() -> str:
        raise Flaky("never")

    def accept(err: BaseException) -> bool:
        return isinstance(err, Flaky)

    result = asyncio.run(
        retry.until_async(
            flaky, deadline=10, every=0.01, retry_on=accept, on_retry=lambda e: seen.append(str(e))
        )
    )
    assert (result, len(calls), seen) == ("ok", 3, ["try 1", "try 2"])
    with pytest.raises(retry.GaveUp) as gave_up:
        asyncio.run(retry.until_async(always, deadline=0.05, every=0.01, retry_on=accept))
    assert str(gave_up.value.last_attempt.exception()) == "never"


def test_until_async_passes_a_cancellation_through() -> None:
    import asyncio

    async def cancelled() -> None:
        raise asyncio.CancelledError

    def accept(err: BaseException) -> bool:
        return isinstance(err, Exception)

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(retry.until_async(cancelled, deadline=10, every=0.01, retry_on=accept))
