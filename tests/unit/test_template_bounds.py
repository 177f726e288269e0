"""Task templates are bounded by the work they do, not only by what they output
(raftsched/dags/sandbox.py, template_sizes.py), and render_task runs them in a helper process
with a memory limit and a deadline (render_limits.py, render_helper.py).

Each attack must be refused with a message saying what was too large, without the process
ever holding the value (before: ``"%0300000000d" % 1`` built 1.1 GiB, then the output check
refused it). Memory is measured in fresh processes (their peak RSS), never with a clock.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from raftsched.dags import render_limits
from raftsched.dags.templating import render_task, render_text
from raftsched.errors import TemplateError

# The child runs from the checkout, so `python -c` imports this raftsched whatever the cwd
ROOT = str(Path(__file__).resolve().parents[2])

S = '{% set s = "x" * 999999 %}'  # a value just within the bound
S100K = '{% set s = "x" * 99999 %}'
ATTACKS = [
    ('{{ "%0300000000d" % 1 }}', "a width of 300000000 is too large"),
    ('{{ "%.*d" % (300000000, 1) }}', "a precision of 300000000 is too large"),
    ('{{ "%(a)0300000000d" % {"a": 1} }}', "a width of 300000000 is too large"),
    ('{{ "{:0300000000}".format(1) }}', "a width of 300000000 is too large"),
    ('{{ "{a:>300000000}".format_map({"a": 1}) }}', "a width of 300000000 is too large"),
    ('{{ "%300000000s"|format(1) }}', "a width of 300000000 is too large"),
    ('{{ "x" * 10**9 }}', "the result of * is too large"),
    ("{{ [1] * 10**8 }}", "the result of * is too large"),
    (S100K + "{{ ([s] * 999)|join }}", "the result of * is too large"),
    (S + "{{ [s, s, s]|join }}", "literal is too large"),
    ("{{ ([1] * 999999)|join }}", "the result of * is too large"),
    ('{{ ("x" * 999999)|batch(1)|join }}', "the result of |join is too large"),
    ('{{ ("x" * 999).join("y" * 999999) }}', "the result of join is too large"),
    ('{{ ("y" * 999999)|join("x" * 999) }}', "the result of |join is too large"),
    ('{{ ("a" * 1001)|replace("a", "a" * 1000) }}', "the result of |replace is too large"),
    ('{{ ("a" * 1001).replace("a", "a" * 1000) }}', "the result of replace is too large"),
    (S + "{{ s ~ s }}", "the result of ~ is too large"),
    (S + "{{ s + s }}", "the result of + is too large"),
    ('{{ ("a\n" * 400000)|indent("x" * 100) }}', "the result of |indent is too large"),
    ('{{ ("a " * 400000)|wordwrap(1, wrapstring="y" * 100) }}', "the result of |wordwrap"),
    ('{{ ("\t" * 999999).expandtabs(100) }}', "the result of expandtabs is too large"),
    ('{{ ("a" * 999999).translate({97: "b" * 100}) }}', "the result of translate is too large"),
    ("{{ [[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]|tojson(indent=999999) }}", "|tojson"),
    ('{{ ("http://a " * 99999)|urlize(target="t" * 999) }}', "the result of |urlize"),
    ('{{ "x".zfill(10**8) }}', "argument 100000000 is too large"),
    ("{{ lipsum(999999) }}", "lipsum of 999999 paragraphs"),
    (  # a macro doubling its argument: 2**40 characters
        "{% macro f(s, n) %}{% if n %}{{ f(s ~ s, n - 1) }}{% endif %}{% endmacro %}"
        '{{ f("x", 40) }}',
        "the result of ~ is too large",
    ),
    (  # nested loops inside a macro and a block build one huge string
        S + "{% macro m() %}{% for i in range(1000) %}{{ s }}{% endfor %}{% endmacro %}{{ m() }}",
        "a macro's or block's output is too large",
    ),
    (
        S + "{% set b %}{% for i in range(99) %}{% for j in range(99) %}{{ s }}{% endfor %}"
        "{% endfor %}{% endset %}{{ b|length }}",
        "a macro's or block's output is too large",
    ),
    ("{% for i in range(99999) %}{{ 'y' * 100 }}{% endfor %}", "the output is longer than"),
]


@pytest.mark.parametrize(("text", "expected"), ATTACKS)
def test_each_attack_is_refused_saying_what_was_too_large(text: str, expected: str) -> None:
    with pytest.raises(TemplateError) as caught:
        render_text(text, {}, "command")
    message = str(caught.value)
    assert message.startswith("template error in command") and expected in message, message
    assert "refused by the sandbox" in message


def test_the_attacks_never_build_their_values() -> None:
    """All of them in one fresh process, rendered by the sandbox alone (no helper): its peak
    memory stays far below what any one attack would build."""
    script = textwrap.dedent(
        """
        import json, resource, sys
        from raftsched.dags.templating import TemplateError, render_text
        refused = 0
        for text in json.loads(sys.stdin.read()):
            try:
                render_text(text, {}, "command")
            except TemplateError:
                refused += 1
        import raftsched
        # VmHWM, not ru_maxrss: a child's ru_maxrss counts the memory of the process it was
        # forked from (the test runner, hundreds of MB late in a run) up to its exec
        with open("/proc/self/status") as status:
            hwm = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
        peak = max(hwm, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) // 1024
        print(refused, peak, raftsched.__file__)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps([text for text, _ in ATTACKS]),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    refused, peak_mb, module = done.stdout.split()
    assert int(refused) == len(ATTACKS), done.stdout
    assert int(peak_mb) < 200, f"peak RSS {peak_mb} MB ({module})"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{{ "%05d|%-4s|%.2f" % (7, "a", 1.5) }}', "00007|a   |1.50"),
        ('{{ "{:>4}{:.1f}".format("a", 2) }}', "   a2.0"),
        ('{{ "{a}-{b:03d}".format_map({"a": "x", "b": 5}) }}', "x-005"),
        ('{{ [1, 2, 3]|join(",") }} {{ "abc"|replace("b", "B") }}', "1,2,3 aBc"),
        (
            '{{ "-".join("abc") }} {{ ",".join(range(3)|map("string")) }} {{ "ab"|join(".") }}',
            "a-b-c 0,1,2 a.b",
        ),
        ('{{ "a\nb"|indent(2) }}|{{ "aa bb"|wordwrap(2) }}', "a\n  b|aa\nbb"),
        ('{{ {"k": [1]}|tojson(indent=1) }}', '{\n "k": [\n  1\n ]\n}'),
        (
            '{{ "ab" * 3 ~ "c" + "d" }} {{ (1, 2) + (3,) }} {{ "%s" % [1] }}',
            "abababcd (1, 2, 3) [1]",
        ),
        ("{% macro m(x) %}<{{ x }}>{% endmacro %}{% set b %}{{ m(1) }}{% endset %}{{ b }}", "<1>"),
        ("{{ range(3)|batch(2)|list }} {{ 'x'|truncate(10) }}", "[[0, 1], [2]] x"),
        (
            '{{ "see https://example.com"|urlize }}',
            'see <a href="https://example.com" rel="noopener">https://example.com</a>',
        ),
        ("{{ lipsum(1, html=False)|length > 0 }} {{ ('x' * 999999)|length }}", "True 999999"),
        (  # big numbers are values, not sizes; floats count as long as they print
            '{{ "{}-{:,}".format(1700000000, 10**12) }} {{ "%d"|format(1700000000) }}'
            " {{ ([0.125] * 20000)|join(',')|length }} {{ ('%.1f' % 1e300)|length }}",
            "1700000000-1,000,000,000,000 1700000000 119999 303",
        ),
    ],
)
def test_ordinary_templates_render_as_before(text: str, expected: str) -> None:
    assert render_text(text, {}, "command") == expected


def test_an_error_of_any_type_is_a_template_error() -> None:
    with pytest.raises(TemplateError, match="has no attribute"):
        render_text("{{ 400000|wordwrap(1) }}", {}, "command")  # AttributeError inside


@pytest.fixture
def fresh_helper(monkeypatch: pytest.MonkeyPatch):
    """One helper (a pool of one), stopped after the test."""
    pool = render_limits._Pool(1)
    pool.idle.append(render_limits._Helper())
    monkeypatch.setattr(render_limits, "_pool", pool)
    yield pool.idle[0]
    pool.stop()


# 100,000 copies of a million characters: minutes of work, so it runs to whatever deadline
SLOW = "{% for i in range(99999) %}{% if ('x' * 999999).replace('x', 'y') %}{% endif %}{% endfor %}"


def _render(command: str, env: tuple[tuple[str, str], ...] = ()) -> str:
    return render_task(command=command, env=env, kwargs={}, context={"n": 3}).command


def test_render_task_renders_in_a_helper_process(fresh_helper) -> None:
    assert _render("echo {{ n }}") == "echo 3"
    assert fresh_helper.proc is not None and fresh_helper.proc.poll() is None
    assert _render("echo plain") == "echo plain"  # no template: no helper needed


def test_airflow_names_render_in_the_helper_process(fresh_helper) -> None:
    """The context with Airflow's names (``ti.xcom_pull``, ``macros``, ``var``, ``dag_run``)
    crosses to the helper: a closure in it made every such render raise."""
    from datetime import UTC, datetime

    from raftsched.dags.templating import template_context

    context = template_context(
        dag_id="d",
        run_id="r",
        task_id="t",
        try_number=1,
        logical_date=datetime(2024, 3, 2, tzinfo=UTC),
        data_interval_start=datetime(2024, 3, 1, tzinfo=UTC),
        data_interval_end=datetime(2024, 3, 2, tzinfo=UTC),
        conf={"k": 1},
        secret_env=[("RAFTSCHED_VAR_FOO", "bar")],
        upstream_results={"up": '{"a": 1}'},
    )
    text = "{{ macros.ds_add(ds, 1) }} {{ ti.xcom_pull(task_ids='up')['a'] }} {{ var.value.FOO }}"
    rendered = render_task(command=text, env=(), kwargs={}, context=context)
    assert rendered.command == "2024-03-03 1 bar"
    assert fresh_helper.proc is not None and fresh_helper.proc.poll() is None


def test_a_render_past_the_memory_limit_fails_alone(fresh_helper, monkeypatch) -> None:
    """Each value within the sandbox's bounds, 120 of them together past a 64 MiB limit."""
    monkeypatch.setattr(render_limits, "RENDER_MEMORY_BYTES", 64 * 1024 * 1024)
    env = tuple((f"V{i}", "{{ 'x' * 999999 }}") for i in range(120))
    with pytest.raises(TemplateError, match="memory") as caught:
        _render("true", env)
    assert str(caught.value).startswith("template error")
    assert _render("echo {{ n }}") == "echo 3"  # the next render has a helper again


def test_a_render_past_the_deadline_is_killed(fresh_helper, monkeypatch) -> None:
    assert _render("echo {{ n }}") == "echo 3"  # started: the deadline is the render's alone
    monkeypatch.setattr(render_limits, "RENDER_WALL_SECONDS", 0.2)
    with pytest.raises(TemplateError, match=r"rendering took longer than 0.2s"):
        _render(SLOW)
    assert fresh_helper.proc is None  # killed
    assert _render("echo {{ n }}") == "echo 3"


def test_without_a_helper_the_sandbox_alone_bounds_the_render(fresh_helper, monkeypatch) -> None:
    monkeypatch.setattr(render_limits, "HELPER_MODULE", "raftsched.no_such_module")
    assert _render("echo {{ n }}") == "echo 3"  # rendered here, with a warning
    with pytest.raises(TemplateError, match="a width of 300000000 is too large"):
        _render('{{ "%0300000000d" % 1 }}')


def test_a_slow_render_holds_one_helper_not_every_render(monkeypatch) -> None:
    """While one render runs to its deadline (its loops would need minutes), a second render
    is answered by a second helper (both started beforehand)."""
    import threading

    pool = render_limits._Pool(2)
    for _ in range(2):
        helper = render_limits._Helper()
        helper._start()
        pool.idle.append(helper)
    monkeypatch.setattr(render_limits, "_pool", pool)
    monkeypatch.setattr(render_limits, "RENDER_WALL_SECONDS", 3.0)  # the slow one's end
    outcome: list[str] = []

    def stuck() -> None:
        try:
            _render(SLOW)
        except TemplateError as err:
            outcome.append(str(err))

    thread = threading.Thread(target=stuck)
    thread.start()
    try:
        for _ in range(2000):  # until the slow render holds its helper
            if len(pool.idle) < 2:
                break
            threading.Event().wait(0.005)
        assert _render("echo {{ n }}") == "echo 3"
        assert thread.is_alive(), "the second render waited for the slow one"
    finally:
        thread.join(timeout=60)
        pool.stop()
    assert outcome and "rendering took longer than 3s" in outcome[0], outcome


def test_a_forked_child_starts_helpers_of_its_own(fresh_helper) -> None:
    """It holds no copy of its parent's helper pipes (they would keep that helper alive after
    the parent is gone) and renders through a helper of its own."""
    import os

    assert _render("echo {{ n }}") == "echo 3"
    parent_helper = fresh_helper.proc.pid
    parent_pipe = fresh_helper.proc.stdin.fileno()  # the helper's EOF: its caller is gone
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: render, report which helper answered, leave at once
        code = 1
        try:
            try:
                os.fstat(parent_pipe)
                holds_pipe = True  # it would keep the parent's helper alive
            except OSError:
                holds_pipe = False
            ok = not holds_pipe and _render("echo {{ n }}") == "echo 3"
            helper = render_limits._pool.idle[0].proc.pid
            os.write(write_fd, f"{ok} {helper}".encode())
            render_limits._pool.stop()
            code = 0
        finally:
            os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd) as answer:
        report = answer.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, report
    ok, helper = report.split()
    assert ok == "True" and int(helper) != parent_helper
    assert _render("echo {{ n }}") == "echo 3"  # the parent's helper still answers the parent
    assert fresh_helper.proc is not None and fresh_helper.proc.pid == parent_helper


WORKER_ATTEMPT = """
import json, resource
from datetime import UTC, datetime
from raftsched.core.model import TaskKey
from raftsched.worker.runner import Attempt
from raftsched.worker.transport import Assignment

day = datetime(2024, 3, 5, tzinfo=UTC).isoformat()
assignment = Assignment(
    key=TaskKey("d", "manual__1", "t"), token=1, try_number=1, kind="bash",
    command='echo {{ "%0300000000d" % 1 }}', logical_date=day, data_interval_start=day,
    data_interval_end=day, conf={}, params_json="",
)
lines = []
outcome = Attempt(assignment, lambda stream, text: lines.append(text)).run()
with open("/proc/self/status") as status:  # VmHWM: see test_the_attacks_never_build_their_values
    hwm = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
peak = max(hwm, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) // 1024
import raftsched
print(json.dumps({"success": outcome.success, "message": outcome.message, "peak_mb": peak,
                  "module": raftsched.__file__}))
"""


def test_a_real_worker_attempt_fails_with_the_reason_and_stays_small() -> None:
    done = subprocess.run(
        [sys.executable, "-c", WORKER_ATTEMPT],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["success"] is False
    assert "a width of 300000000 is too large" in result["message"], result
    assert result["peak_mb"] < 200, result


DUMPABLE_CHECK = """
import os
from raftsched.dags import render_limits
helper = render_limits._Helper()
proc = helper._start()
print(os.stat(f"/proc/{proc.pid}/environ").st_uid)
helper._stop()
"""


def test_the_render_helper_is_not_readable_by_its_own_user() -> None:
    """Every attempt's declared secrets pass through the helper's memory: run as an ordinary
    user, the helper's /proc files must be root's (non-dumpable), not that user's."""
    import os
    import shutil
    import sysconfig
    import tempfile
    from pathlib import Path

    system_python, setpriv = "/usr/bin/python3.11", shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None or not os.access(system_python, os.X_OK):
        pytest.skip("needs root, setpriv and the system python3.11 (CI has them)")
    folder = Path(tempfile.mkdtemp(prefix="raftsched-dumpable-", dir="/tmp"))  # nobody enters
    folder.chmod(0o755)
    script = folder / "check.py"
    script.write_text(DUMPABLE_CHECK)
    script.chmod(0o644)
    repo = Path(__file__).resolve().parents[2]
    path = os.pathsep.join((str(repo), sysconfig.get_paths()["purelib"]))
    as_nobody = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "env"]
    try:
        done = subprocess.run(
            [*as_nobody, f"PYTHONPATH={path}", "HOME=/tmp", system_python, str(script)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if done.returncode != 0:
        pytest.skip(f"the system python cannot run raftsched as nobody: {done.stderr[-300:]}")
    assert done.stdout.split()[-1] == "0", done.stdout
