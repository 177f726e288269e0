"""The backfill form (operators): a date range and a conf, a dry run that lists the schedule
slots it would create (and those it leaves because they have a run), then the same request
for real, like ``airflow dags backfill`` and the Airflow UI's backfill dialog.

The cluster decides the slots (the DAG's own schedule, both ends included, up to now, at
most 1000 per request: ``raftsched/api/servicers/backfill.py``); this page only shows them.
A refusal (no schedule, end before start, too many slots) is a form error, HTTP 400.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, flash, redirect, render_template, request, url_for
from flask_wtf import FlaskForm
from raftsched.web.auth import role_required
from raftsched.web.forms import parse_conf, parse_logical_date
from raftsched.web.gateway import Refused, gateway
from raftsched.web.gateway_backfill import backfill
from wtforms import StringField, TextAreaField
from wtforms.validators import DataRequired, ValidationError

bp = Blueprint("backfill", __name__)


class BackfillForm(FlaskForm):
    start_date = StringField("From (logical date, ISO 8601, UTC)", validators=[DataRequired()])
    end_date = StringField("To (included)", validators=[DataRequired()])
    conf = TextAreaField("Conf of every run (a JSON object)", default="{}")

    def validate_conf(self, field: Any) -> None:
        try:
            parse_conf(field.data)
        except ValueError as err:
            raise ValidationError(str(err)) from None

    def validate_start_date(self, field: Any) -> None:
        self._date(field)

    def validate_end_date(self, field: Any) -> None:
        self._date(field)

    @staticmethod
    def _date(field: Any) -> None:
        try:
            parse_logical_date(field.data)
        except ValueError as err:
            raise ValidationError(str(err)) from None


@bp.route("/dags/<dag_id>/backfill", methods=["GET", "POST"])
@role_required("operator")
def page(dag_id: str) -> Any:
    dag = gateway().get_dag(dag_id)  # 404 before a form for a DAG that is not there
    form = BackfillForm()
    preview = None
    if form.validate_on_submit():
        dry_run = request.form.get("action") != "create"
        try:
            found = backfill(
                gateway(),
                dag_id,
                parse_logical_date(form.start_date.data),  # type: ignore[arg-type]
                parse_logical_date(form.end_date.data),  # type: ignore[arg-type]
                parse_conf(form.conf.data or ""),
                dry_run=dry_run,
            )
        except Refused as err:
            form.form_errors.append(err.message)
        else:
            if dry_run:
                preview = found
            else:
                created, skipped = len(found["runs"]), len(found["skipped"])
                flash(
                    f"Backfill of {dag_id}: {created} run(s) created"
                    + (f", {skipped} slot(s) already had one." if skipped else "."),
                    "success",
                )
                return redirect(url_for("runs.list_page", dag_id=dag_id))
    status = 400 if request.method == "POST" and preview is None else 200
    return render_template("dags/backfill.html", dag=dag, form=form, preview=preview), status
