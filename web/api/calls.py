"""Gateway calls only the REST API makes so far: a followed GetTaskLog (BackfillDag, which
the backfill form makes too, is ``raftsched.web.gateway_backfill``).

Each takes the caller's :class:`~raftsched.web.gateway.Gateway` (the REST API's is
:class:`~raftsched.web.api.upstream.ApiGateway`) and answers plain values, as its methods do.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from raftsched.web import metrics
from raftsched.web.gateway import Gateway, Unavailable, _translate
from raftsched.web.view_models import ts

from raftsched.api.gen import dag_pb2
from raftsched.errors import ApiError, NoQuorumError


def follow_task_log(
    gw: Gateway,
    dag_id: str,
    run_id: str,
    task_id: str,
    *,
    try_number: int = 0,
    after_seq: int = 0,
    timeout: float = 20.0,
) -> Iterable[dict[str, Any]]:
    """GetTaskLog with ``follow``: chunks as they come until the attempt ends (the generator
    returns) or ``timeout`` seconds pass (it raises :class:`Unavailable` with code
    DEADLINE_EXCEEDED; resume with ``after_seq`` = the last chunk's ``seq``)."""
    request = dag_pb2.GetTaskLogRequest(
        dag_id=dag_id,
        run_id=run_id,
        task_id=task_id,
        try_number=try_number,
        after_seq=after_seq,
        follow=True,
    )
    stream = gw._call("dags", "GetTaskLog", request, timeout=timeout)
    try:
        for chunk in stream:
            yield {
                "seq": chunk.seq,
                "try_number": chunk.try_number,
                "stream": chunk.stream,
                "text": chunk.text,
                "created_at": ts(chunk, "created_at"),
            }
    except NoQuorumError as err:
        metrics.upstream_error("GetTaskLog", "UNAVAILABLE")
        raise Unavailable(str(err), "UNAVAILABLE") from None
    except ApiError as err:
        raise _translate(err, "GetTaskLog") from None
    finally:
        stream.close()
