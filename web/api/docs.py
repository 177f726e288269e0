"""``/api/v1/docs``: the OpenAPI document as one self-contained HTML page.

Rendered on the server from the same spec as ``/api/v1/openapi.json`` (no JavaScript, nothing
loaded from a CDN), so it works where the webserver has no internet access.
"""

from __future__ import annotations

import json
from typing import Any

from flask import current_app, render_template_string

EXTENSION = "raftsched_rest_api"
METHODS = ("get", "post", "put", "patch", "delete")

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>{{ info.title }} {{ info.version }}</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:60rem;padding:0 1rem;color:#222}
h2{border-bottom:1px solid #ccc;margin-top:2rem}
.op{border:1px solid #ddd;border-radius:4px;margin:.75rem 0;padding:.5rem .75rem}
.m{display:inline-block;min-width:4.2rem;font-weight:700;text-transform:uppercase}
.get{color:#1565c0}.post{color:#2e7d32}.delete{color:#c62828}
code,pre{background:#f5f5f5;padding:0 .2rem}pre{padding:.5rem;overflow:auto}
table{border-collapse:collapse}
td,th{border-bottom:1px solid #eee;padding:.15rem .6rem;text-align:left}
</style></head><body>
<h1>{{ info.title }} <small>{{ info.version }}</small></h1>
<p>{{ info.description }}</p>
<p>The machine-readable document: <a href="{{ spec_url }}">{{ spec_url }}</a> (OpenAPI
{{ openapi }}).</p>
{% for tag, ops in groups %}
<h2 id="{{ tag }}">{{ tag }}</h2>
{% for op in ops %}
<div class="op" id="{{ op.id }}">
<div><span class="m {{ op.method }}">{{ op.method }}</span> <code>{{ op.path }}</code>
{% if op.public %}<em>(no token)</em>{% endif %}</div>
<p><strong>{{ op.summary }}</strong>{% if op.description %}<br>{{ op.description }}{% endif %}</p>
{% if op.parameters %}<table><tr><th>parameter</th><th>in</th><th>type</th><th></th></tr>
{% for p in op.parameters %}<tr><td><code>{{ p.name }}</code>{% if p.required %} *{% endif %}</td>
<td>{{ p.in }}</td><td>{{ p.type }}</td><td>{{ p.description }}</td></tr>{% endfor %}
</table>{% endif %}
{% if op.body %}<p>Body (JSON): <code>{{ op.body }}</code></p>{% endif %}
<p>Answers: {% for code, text in op.responses %}<code>{{ code }}</code> {{ text }}
{%- if not loop.last %}; {% endif %}{% endfor %}</p>
</div>
{% endfor %}{% endfor %}
<h2 id="schemas">Schemas</h2>
{% for name, schema in schemas %}<h3 id="schema-{{ name }}">{{ name }}</h3>
<pre>{{ schema }}</pre>{% endfor %}
</body></html>
"""


def _type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if schema.get("type") == "array":
        return f"array of {_type(schema.get('items', {}))}"
    return str(schema.get("type", "object"))


def operations(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Every operation of the document, flattened for the page (and the tests)."""
    found = []
    for path, item in spec.get("paths", {}).items():
        for method in METHODS:
            op = item.get(method)
            if op is None:
                continue
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {})
            found.append(
                {
                    "id": op.get("operationId") or f"{method}-{path}",
                    "method": method,
                    "path": path,
                    "tag": (op.get("tags") or ["API"])[0],
                    "summary": op.get("summary", ""),
                    "description": op.get("description", ""),
                    "public": op.get("security") == [],
                    "parameters": [
                        {
                            "name": p.get("name"),
                            "in": p.get("in"),
                            "required": p.get("required", False),
                            "type": _type(p.get("schema", {})),
                            "description": p.get("description", ""),
                        }
                        for p in item.get("parameters", []) + op.get("parameters", [])
                    ],
                    "body": _type(body["schema"]) if "schema" in body else "",
                    "responses": [
                        (code, r.get("description", "")) for code, r in op["responses"].items()
                    ],
                }
            )
    return found


def docs() -> Any:
    api = current_app.extensions[EXTENSION]
    spec = api.spec.to_dict()
    groups: dict[str, list[dict[str, Any]]] = {}
    for op in operations(spec):
        groups.setdefault(op["tag"], []).append(op)
    schemas = sorted(spec.get("components", {}).get("schemas", {}).items())
    return render_template_string(
        PAGE,
        info=spec["info"],
        openapi=spec["openapi"],
        spec_url="/api/v1/openapi.json",
        groups=list(groups.items()),
        schemas=[(name, json.dumps(schema, indent=2)) for name, schema in schemas],
    )
