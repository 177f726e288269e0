"""DAG files that failed to load, with their tracebacks."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, render_template
from raftsched.web.auth import login_required
from raftsched.web.gateway import gateway

bp = Blueprint("import_errors", __name__)


@bp.get("/import-errors")
@login_required
def page() -> Any:
    return render_template("import_errors.html", errors=gateway().import_errors())
