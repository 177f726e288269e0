"""Airflow's ``HttpSensor`` over deferral (docs/architecture.md §17): waits until a request
answers 2xx (and ``response_check(response)`` says yes, when given).

The URL is ``endpoint`` when it is a full ``http(s)://`` URL, else the connection
``http_conn_id``'s scheme, host, port and path (declared for the task, read from its
environment on the worker) joined with ``endpoint``; ``request_params`` go into the query.
``deferrable=True``: the triggerer polls the URL (an ``http`` trigger) until it answers
200, and the resumed attempt checks once more with ``response_check``. A trigger's arguments
travel through the Raft log, so a deferred wait sends neither ``headers`` nor the
connection's login and password: with either, the sensor pokes (or reschedules) on a worker.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from raftsched.airflow._sensors import BaseSensorOperator
from raftsched.dags.deferral import BaseTrigger, HttpTrigger
from raftsched.secrets import get_connection

TIMEOUT = 10.0
MAX_BODY = 1024 * 1024


class HttpResponse:
    """What ``response_check`` gets (the parts of a ``requests.Response`` it reads)."""

    def __init__(self, status_code: int, text: str, headers: dict[str, str]) -> None:
        self.status_code, self.text, self.headers = status_code, text, headers

    def json(self) -> Any:
        return json.loads(self.text)


class HttpSensor(BaseSensorOperator):
    def __init__(
        self,
        *,
        endpoint: str,
        http_conn_id: str = "http_default",
        method: str = "GET",
        request_params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        response_check: Callable[..., Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.endpoint, self.method = str(endpoint), method.upper()
        self.full_url = self.endpoint.startswith(("http://", "https://"))
        self.conn_id = None if self.full_url else http_conn_id
        self.request_params = dict(request_params or {})
        self.headers = dict(headers or {})
        self.response_check = response_check
        if self.conn_id is not None:
            declared = list(kwargs.pop("connections", None) or [])
            kwargs["connections"] = sorted({*declared, self.conn_id})
        super().__init__(**kwargs)

    def poke_args(self) -> dict[str, Any]:
        return {"endpoint": self.endpoint, "conn_id": self.conn_id}

    def _target(self, args: dict[str, Any]) -> tuple[str, str]:
        """(the URL, an Authorization header value or "")."""
        url, auth = args["endpoint"], ""
        if args.get("conn_id"):
            conn = get_connection(args["conn_id"])
            scheme = conn.conn_type if conn.conn_type in ("http", "https") else "http"
            port = f":{conn.port}" if conn.port else ""
            base = f"{scheme}://{conn.host}{port}/{conn.schema}".rstrip("/")
            url = f"{base}/{url.lstrip('/')}" if url else base
            if conn.login or conn.password:
                token = base64.b64encode(f"{conn.login}:{conn.password}".encode()).decode()
                auth = f"Basic {token}"
        if self.request_params and self.method == "GET":
            url += ("&" if "?" in url else "?") + urlencode(self.request_params)
        return url, auth

    def poke(self, args: dict[str, Any]) -> bool:
        url, auth = self._target(args)
        headers = {**self.headers, **({"Authorization": auth} if auth else {})}
        request = urllib.request.Request(url, method=self.method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:
                response = HttpResponse(
                    answer.status,
                    answer.read(MAX_BODY).decode("utf-8", "replace"),
                    dict(answer.headers),
                )
        except (urllib.error.URLError, OSError, ValueError):
            return False  # not there yet (an HTTPError is a URLError: 4xx, 5xx)
        if self.response_check is not None:
            return bool(self.response_check(response))
        return 200 <= response.status_code < 300

    def trigger(self, args: dict[str, Any], interval: float) -> BaseTrigger:
        url, _ = self._target(args)  # no credentials here: _run made sure of it
        return HttpTrigger(url, method=self.method, poke_interval=interval)

    def _run(self, sensor: dict[str, Any], event: Any = None, deadline: str = "") -> Any:
        if event is not None and not deadline and self.response_check is None:
            return event
        if sensor.get("deferrable") and (self.headers or self._target(sensor["args"])[1]):
            # what the request needs cannot travel in a trigger: reschedule between pokes
            sensor = {**sensor, "deferrable": False, "mode": "reschedule"}
        return super()._run(sensor, None, deadline)
