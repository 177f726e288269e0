"""Params and templates: a manual DAG whose trigger conf is checked against typed params, and
whose commands and kwargs are rendered with Jinja2 just before each attempt starts.

    raftsched dags trigger example_params --conf '{"region": "us", "days": 3}'
    raftsched dags trigger example_params --conf '{"days": "three"}'   # refused: names "days"

The task page shows each task's rendered command or kwargs under "Rendered".
"""

from __future__ import annotations

from raftsched import DAG, BashTask, Param, PythonTask


def summarize(region: str, window: str, label: str) -> None:
    print(f"[{label}] summary for {region} over {window}")


with DAG(
    "example_params",
    schedule=None,
    tags=["example", "params"],
    description="Typed params, a checked trigger conf and templated commands",
    params={
        "region": Param("eu", enum=["eu", "us", "apac"], description="which warehouse"),
        "days": Param(7, type="integer", minimum=1, maximum=31, description="report window"),
        "label": "weekly",  # a plain default: any JSON value
    },
):
    export = BashTask(
        "export",
        command=(
            "echo exporting {{ params.days }} days of {{ params.region }}"
            " up to {{ ds }} for run {{ run_id }}"
        ),
        env={"EXPORT_DAY": "{{ ds_nodash }}"},
    )
    report = PythonTask(
        "report",
        fn=summarize,
        kwargs={
            "region": "{{ params.region | upper }}",
            "window": "{{ data_interval_start }}..{{ data_interval_end }}",
            "label": "{{ params.label }}",
        },
    )
    export >> report
