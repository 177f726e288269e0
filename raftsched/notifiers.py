"""Built-in notifiers: callbacks that post a Slack-compatible webhook or send an email.

In a DAG file they stand where a callback function would::

    from raftsched.notifiers import WebhookNotifier, EmailNotifier

    DAG(..., on_failure_callback=WebhookNotifier(conn_id="alerts_hook"))
    BashTask(..., on_retry_callback=EmailNotifier(to="oncall@example.com", conn_id="smtp"))

The DAG file's parse records each one by name ("raftsched:webhook", "raftsched:email") and
its settings (JSON); a worker runs it like any callback (``worker/_run_callback.py``), with
the context dict of the event. A ``conn_id`` names a raftsched connection (``raftsched
connections add``) the worker fetches for this callback only; its value never reaches a log.

- Webhook: ``POST`` of ``{"text": TEXT}`` (what Slack, Mattermost, Rocket.Chat and Teams'
  incoming webhooks take) to the connection's URI (``https://hooks.slack.com/services/...``)
  or to ``url``. Any answer but 2xx fails the callback.
- Email: SMTP through the connection ``smtp://user:password@host:587?starttls=true`` (or
  ``smtps://`` for TLS from the start; no login when the URI has none).

``text``, ``subject`` and ``body`` may use ``{dag_id}``, ``{run_id}``, ``{task_id}``,
``{try_number}``, ``{event}``, ``{state}``, ``{logical_date}``, ``{message}`` (str.format
fields; an unknown one stays as written). Every network call has a timeout (``timeout``,
seconds, default 10, at most 60).
"""

from __future__ import annotations

import json
from typing import Any

# smtplib, ssl, urllib.request and email are imported where they are used: every DAG file
# imports this module (through the authoring API), and they cost its parse time.

WEBHOOK = "raftsched:webhook"
EMAIL = "raftsched:email"
DEFAULT_TIMEOUT = 10.0
MAX_TIMEOUT = 60.0
DEFAULT_TEXT = "raftsched: {event} of DAG {dag_id}, run {run_id}{task_part}: {state}{message_part}"
DEFAULT_SUBJECT = "raftsched: {event} of {dag_id} ({run_id})"


class Notifier:
    """A built-in notifier as a DAG file writes it; ``ref`` and ``settings`` go to the spec.
    Calling it runs it at once (as a worker would: handy in ``dags test`` and unit tests)."""

    ref = ""

    def __init__(self, **settings: Any) -> None:
        self.settings = {k: v for k, v in settings.items() if v is not None}
        json.dumps(self.settings)  # a TypeError now, in the DAG file, if not JSON-able

    def __call__(self, context: dict[str, Any]) -> None:
        run_notifier(self.ref, context, self.settings)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.settings!r})"


class WebhookNotifier(Notifier):
    """Posts ``{"text": text}`` to the webhook of connection ``conn_id`` (or ``url``)."""

    ref = WEBHOOK

    def __init__(
        self,
        conn_id: str | None = None,
        *,
        url: str | None = None,
        text: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        slack_webhook_conn_id: str | None = None,  # Airflow's SlackWebhookNotifier spelling
    ) -> None:
        conn_id = conn_id or slack_webhook_conn_id
        if not conn_id and not url:
            raise ValueError("WebhookNotifier needs conn_id (a raftsched connection) or url")
        super().__init__(conn_id=conn_id, url=url, text=text, timeout=float(timeout))


class EmailNotifier(Notifier):
    """Sends an email through the SMTP connection ``conn_id``."""

    ref = EMAIL

    def __init__(
        self,
        to: str | list[str],
        conn_id: str | None = None,
        *,
        subject: str | None = None,
        body: str | None = None,
        from_email: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        smtp_conn_id: str | None = None,  # Airflow's SmtpNotifier spelling
        html_content: str | None = None,
    ) -> None:
        conn_id = conn_id or smtp_conn_id
        if not conn_id:
            raise ValueError("EmailNotifier needs conn_id: a raftsched connection smtp://...")
        recipients = [to] if isinstance(to, str) else list(to)
        super().__init__(
            to=recipients,
            conn_id=conn_id,
            subject=subject,
            body=body or html_content,
            from_email=from_email,
            timeout=float(timeout),
        )


# Airflow's names, for DAGs ported from it
SlackWebhookNotifier = WebhookNotifier
SmtpNotifier = EmailNotifier


# -- running them (on a worker) --------------------------------------------------------------


def run_notifier(ref: str, context: dict[str, Any], settings: dict[str, Any]) -> None:
    if ref == WEBHOOK:
        send_webhook(context, **settings)
    elif ref == EMAIL:
        send_email(context, **settings)
    else:
        raise ValueError(f"{ref!r} is not a built-in notifier")


def send_webhook(
    context: dict[str, Any],
    *,
    conn_id: str | None = None,
    url: str | None = None,
    text: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> None:
    import urllib.request

    target = url or _connection_uri(conn_id)
    if target.startswith("webhook+"):
        target = target[len("webhook+") :]
    body = json.dumps({"text": render(text or DEFAULT_TEXT, context)}).encode()
    request = urllib.request.Request(
        target, data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=_timeout(timeout)) as answer:
        status = answer.status
    if not 200 <= status < 300:
        raise RuntimeError(f"the webhook answered HTTP {status}")
    print(f"webhook notified ({status})")


def send_email(
    context: dict[str, Any],
    *,
    to: list[str],
    conn_id: str,
    subject: str | None = None,
    body: str | None = None,
    from_email: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> None:
    import smtplib
    import ssl
    from email.message import EmailMessage
    from urllib.parse import parse_qs

    from raftsched.secrets import get_connection

    conn = get_connection(conn_id)
    options = {k: v[-1].lower() for k, v in parse_qs(conn.extra).items()}
    message = EmailMessage()
    message["Subject"] = render(subject or DEFAULT_SUBJECT, context)
    message["From"] = from_email or options.get("from") or conn.login or "raftsched@localhost"
    message["To"] = ", ".join(to)
    message.set_content(render(body or DEFAULT_TEXT, context))
    secure = conn.conn_type == "smtps"
    smtp_class = smtplib.SMTP_SSL if secure else smtplib.SMTP
    port = conn.port or (465 if secure else 25)
    with smtp_class(conn.host or "localhost", port, timeout=_timeout(timeout)) as smtp:
        if not secure and options.get("starttls") in ("true", "1", "yes"):
            smtp.starttls(context=ssl.create_default_context())
        if conn.login:
            smtp.login(conn.login, conn.password)
        smtp.send_message(message)
    print(f"email sent to {len(to)} recipient(s)")


def render(template: str, context: dict[str, Any]) -> str:
    """``template`` with the context's fields filled in; unknown fields stay as written."""
    values = {k: "" if v is None else v for k, v in context.items()}
    values.setdefault("task_part", f", task {context['task_id']}" if context.get("task_id") else "")
    message = context.get("message") or ""
    values.setdefault("message_part", f" ({message})" if message else "")
    return template.format_map(_Keep(values))


class _Keep(dict):  # type: ignore[type-arg]
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _connection_uri(conn_id: str | None) -> str:
    from raftsched.secrets import get_connection

    if not conn_id:
        raise ValueError("no conn_id and no url: nowhere to post")
    return get_connection(conn_id).uri


def _timeout(value: float) -> float:
    return min(MAX_TIMEOUT, max(0.1, float(value)))
