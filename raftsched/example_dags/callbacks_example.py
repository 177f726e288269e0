"""Callbacks and alerts: a task that fails on purpose, and who hears about it.

Trigger it by hand (``raftsched dags trigger example_callbacks``): ``flaky`` fails, goes up
for retry once (``on_retry_callback``), fails for good (``on_failure_callback``, given to every
task through ``default_args``), and the run fails (the DAG's ``on_failure_callback``). Each
callback runs on a worker, once, and prints into the log of the task it is about (the DAG's
into the ``__callbacks__`` log of the run). The DAG's ``deadline`` alerts when a run is not
done 30 minutes after its logical date.

To post to Slack (or any Slack-compatible webhook) or send an email instead, use a built-in
notifier with a connection::

    raftsched connections add alerts_hook https://hooks.slack.com/services/T000/B000/XXXX
    on_failure_callback=WebhookNotifier(conn_id="alerts_hook")
    on_failure_callback=EmailNotifier(to="oncall@example.com", conn_id="smtp_relay")
"""

from __future__ import annotations

from datetime import timedelta

from raftsched import DAG, BashTask


def report_failure(context: dict) -> None:
    print(
        f"task {context['task_id']} of {context['dag_id']} failed for good after try"
        f" {context['try_number']}: {context['exception']}"
    )


def report_retry(context: dict) -> None:
    print(f"task {context['task_id']} failed try {context['try_number']}; it will retry")


def report_run(context: dict) -> None:
    print(f"run {context['run_id']} of {context['dag_id']} ended {context['state']}")


def report_late(context: dict) -> None:
    print(f"run {context['run_id']} is late: {context['message']}")


with DAG(
    "example_callbacks",
    schedule=None,
    tags=["example", "callbacks"],
    description="A task that fails on purpose, its retry and failure callbacks, a deadline",
    default_args={"on_failure_callback": report_failure},
    on_failure_callback=report_run,
    on_success_callback=report_run,
    deadline=timedelta(minutes=30),
    on_deadline_callback=report_late,
):
    prepare = BashTask("prepare", command="echo preparing")
    flaky = BashTask(
        "flaky",
        command="echo 'the upstream API said 503' >&2; exit 1",
        retries=1,
        retry_delay=timedelta(seconds=5),
        on_retry_callback=report_retry,
    )
    prepare >> flaky
