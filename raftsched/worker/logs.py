"""Task output on its way to the cluster: a bounded buffer and the thread that ships it.

An attempt's stdout/stderr go into a :class:`LogBuffer` as they are read. A
:class:`LogShipper` thread takes them out in chunks of at most ``chunk_bytes`` (UTF-8) and
sends them with ``append_logs`` every ``flush_interval`` seconds, or at once when a full chunk
is waiting. The cluster numbers the chunks; the worker only keeps them in order.

Memory is bounded: when the cluster is slower than the task's output, the buffer drops its
oldest text past ``max_bytes`` and the next chunk starts with ``[N bytes dropped]``. A
refused ``append_logs`` (stale token) ends shipping for that attempt and calls
``on_refused`` (the worker kills the attempt); an unanswered one (or one the cluster cannot
take yet: RESOURCE_EXHAUSTED, its outbox is full) puts the chunks back at the front and tries
again at the next flush; one the cluster calls invalid (INVALID_ARGUMENT) is dropped with a
warning, never retried forever.

Every text is bounded as ``raftsched.core.limits`` says before it leaves the worker: the
buffer holds clean text only (NUL and invalid UTF-8 become U+FFFD, see :func:`clean_output`),
a chunk is at most ``chunk_bytes`` UTF-8 bytes (so at most MAX_LOG_CHUNK_CHARS characters,
whatever a line's length), a call carries at most MAX_LOG_CHUNKS_PER_CALL chunks, and an
outcome message at most MAX_MESSAGE_CHARS characters (:func:`outcome_message`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from raftsched.core import limits
from raftsched.core.model import TaskKey
from raftsched.errors import RaftschedError
from raftsched.worker.transport import WorkerTransport, describe

log = logging.getLogger(__name__)

CHUNK_BYTES = min(64 * 1024, limits.MAX_LOG_CHUNK_CHARS)  # bytes >= characters: within both
MAX_BUFFER_BYTES = 1024 * 1024
FLUSH_INTERVAL = 0.5
# 1 MiB per append_logs: well under gRPC's 4 MiB message limit, and the cluster's bound
CHUNKS_PER_CALL = min(16, limits.MAX_LOG_CHUNKS_PER_CALL)


def clean_output(text: str) -> str:
    """Task output as the cluster stores it: NUL and lone surrogates become U+FFFD."""
    return limits.clean_text(text)


def outcome_message(text: str) -> str:
    """An attempt's outcome message: clean, at most MAX_MESSAGE_CHARS (the tail is kept: the
    end of a traceback says most)."""
    most = limits.MAX_MESSAGE_CHARS
    if len(text) > most:
        text = "\u2026" + text[-(most - 1) :]
    return limits.clean_text(text)


def _invalid(err: BaseException) -> bool:
    """The cluster refused the request as invalid (INVALID_ARGUMENT): retrying cannot help."""
    return getattr(getattr(err, "code", None), "name", "") == "INVALID_ARGUMENT"


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _split(text: str, max_bytes: int) -> tuple[str, str]:
    """(head, rest): head is the longest prefix of ``text`` within ``max_bytes`` UTF-8 bytes."""
    head = text.encode("utf-8", "surrogatepass")[:max_bytes].decode("utf-8", "ignore")
    return head, text[len(head) :]


class LogBuffer:
    """Thread-safe FIFO of (stream, text), at most ``max_bytes`` (plus one drop marker)."""

    def __init__(self, max_bytes: int = MAX_BUFFER_BYTES, chunk_bytes: int = CHUNK_BYTES) -> None:
        if max_bytes < chunk_bytes:
            raise ValueError(f"max_bytes {max_bytes} < chunk_bytes {chunk_bytes}")
        if chunk_bytes > limits.MAX_LOG_CHUNK_CHARS:  # a chunk's bytes bound its characters
            raise ValueError(f"chunk_bytes {chunk_bytes} > {limits.MAX_LOG_CHUNK_CHARS}")
        self.max_bytes = max_bytes
        self.chunk_bytes = chunk_bytes
        self._pieces: deque[tuple[str, str, int]] = deque()  # (stream, text, utf-8 bytes)
        self._size = 0
        self._dropped = 0  # bytes dropped since the last marker went out
        self._dropped_stream = ""
        self.peak_bytes = 0  # the most ever held: tests check the bound with it
        self.dropped_total = 0
        self._lock = threading.Lock()
        self.ready = threading.Event()  # set when a full chunk is waiting
        self.on_first_write: Callable[[], None] | None = None  # called once, on first text

    def write(self, stream: str, text: str) -> None:
        if not text:
            return
        text = clean_output(text)
        with self._lock:
            size = _utf8_len(text)
            if size > self.max_bytes:  # keep only its tail
                self._drop(stream, size - self.max_bytes)
                text = text.encode("utf-8", "surrogatepass")[-self.max_bytes :].decode(
                    "utf-8", "ignore"
                )
                size = _utf8_len(text)
            self._pieces.append((stream, text, size))
            self._size += size
            while self._size > self.max_bytes:
                self._drop_oldest(self._size - self.max_bytes)
            self.peak_bytes = max(self.peak_bytes, self._size)
            if self._size >= self.chunk_bytes:
                self.ready.set()
            first, self.on_first_write = self.on_first_write, None
        if first is not None:
            first()

    def _drop(self, stream: str, nbytes: int) -> None:
        self._dropped += nbytes
        self.dropped_total += nbytes
        self._dropped_stream = stream

    def _drop_oldest(self, excess: int) -> None:
        stream, text, size = self._pieces.popleft()
        self._size -= size
        if size > excess:  # drop only the front of this piece
            rest = text.encode("utf-8", "surrogatepass")[excess:].decode("utf-8", "ignore")
            rest_size = _utf8_len(rest)
            self._pieces.appendleft((stream, rest, rest_size))
            self._size += rest_size
            size -= rest_size
        self._drop(stream, size)

    def take(self, max_chunks: int = CHUNKS_PER_CALL) -> list[tuple[str, str]]:
        """Up to ``max_chunks`` chunks of at most ``chunk_bytes`` each, oldest first; adjacent
        text of the same stream is joined. A drop marker leads the first chunk."""
        max_chunks = max(1, min(max_chunks, limits.MAX_LOG_CHUNKS_PER_CALL))
        chunks: list[list] = []  # [stream, text, utf-8 bytes]
        with self._lock:
            if self._dropped:
                marker = f"[{self._dropped} bytes dropped]\n"
                chunks.append([self._dropped_stream, marker, len(marker)])
                self._dropped = 0
            while self._pieces:
                stream, text, size = self._pieces[0]
                last = chunks[-1] if chunks else None
                if last is None or last[0] != stream or last[2] >= self.chunk_bytes:
                    if len(chunks) >= max_chunks:
                        break
                    last = [stream, "", 0]
                    chunks.append(last)
                room = self.chunk_bytes - last[2]
                if size <= room:
                    self._pieces.popleft()
                    taken, taken_bytes = text, size
                else:
                    taken, rest = _split(text, room)
                    if not taken:  # the next character does not fit: start a new chunk
                        last[2] = self.chunk_bytes
                        continue
                    taken_bytes = _utf8_len(taken)
                    self._pieces[0] = (stream, rest, size - taken_bytes)
                last[1] += taken
                last[2] += taken_bytes
                self._size -= taken_bytes
            if self._size < self.chunk_bytes:
                self.ready.clear()
        return [(stream, text) for stream, text, _ in chunks]

    def put_back(self, chunks: Sequence[tuple[str, str]]) -> None:
        """Return unsent chunks to the front (the bound still holds: the oldest go first)."""
        with self._lock:
            for stream, text in reversed(chunks):
                size = _utf8_len(text)
                self._pieces.appendleft((stream, text, size))
                self._size += size
            while self._size > self.max_bytes:
                self._drop_oldest(self._size - self.max_bytes)
            self.peak_bytes = max(self.peak_bytes, self._size)

    def __len__(self) -> int:
        with self._lock:
            return self._size + (1 if self._dropped else 0)


class LogShipper:
    """Ships one attempt's :class:`LogBuffer` from a daemon thread until :meth:`close`. The
    thread starts with the attempt's first output: most tasks print little or nothing, and a
    thread per attempt was a tenth of a busy worker's CPU."""

    def __init__(
        self,
        transport: WorkerTransport,
        key: TaskKey,
        token: int,
        buffer: LogBuffer,
        *,
        flush_interval: float = FLUSH_INTERVAL,
        on_refused: Callable[[], None] | None = None,
    ) -> None:
        self.transport = transport
        self.key = key
        self.token = token
        self.buffer = buffer
        self.flush_interval = flush_interval
        self.on_refused = on_refused
        self.refused = False
        self._closing = threading.Event()
        self._deadline = float("inf")
        self._thread = threading.Thread(target=self._run, name=f"logs-{key.task_id}", daemon=True)
        self._started = False
        self._start_lock = threading.Lock()

    def start(self) -> LogShipper:
        """Ship from now on: the thread starts at the first output (or at once if some is
        waiting already)."""
        self.buffer.on_first_write = self._run_thread
        if len(self.buffer):
            self._run_thread()
        return self

    def _run_thread(self) -> None:
        with self._start_lock:
            if not self._started:
                self._started = True
                self._thread.start()

    def close(self, timeout: float = 10.0) -> None:
        """Ship what is left (trying for up to ``timeout`` seconds), then stop the thread."""
        self._deadline = time.monotonic() + timeout
        self._closing.set()
        self.buffer.ready.set()
        self.buffer.on_first_write = None
        if len(self.buffer):
            self._run_thread()
        with self._start_lock:
            started = self._started
        if started:
            self._thread.join(timeout + 1.0)

    def _run(self) -> None:
        while not self.refused:
            if self._closing.is_set():
                if not len(self.buffer) or time.monotonic() > self._deadline:
                    return
            else:
                self.buffer.ready.wait(self.flush_interval)
            if not self.flush():
                time.sleep(min(self.flush_interval, 0.2))  # unanswered: try again soon

    def flush(self) -> bool:
        """Send one batch (if any); False if the cluster did not answer."""
        chunks = self.buffer.take()
        if not chunks:
            return True
        try:
            accepted = self.transport.append_logs(self.key, self.token, chunks)
        except RaftschedError as err:
            if _invalid(err):  # would be refused again and again: drop it, keep shipping
                log.warning("logs of %s refused as invalid, dropped: %s", describe(self.key), err)
                return True
            log.info("logs of %s not shipped yet: %s", describe(self.key), err)
            self.buffer.put_back(chunks)
            return False
        except Exception:
            log.exception("shipping logs of %s failed", describe(self.key))
            self.buffer.put_back(chunks)
            return False
        if not accepted:
            log.info("logs of %s refused: the lease is no longer ours", describe(self.key))
            self.refused = True
            if self.on_refused is not None:
                self.on_refused()
        return True
