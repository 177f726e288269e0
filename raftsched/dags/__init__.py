"""raftsched.dags: the authoring API of DAG files, the DAG file parser, and what a task's
templates and XCom need at run time.

- Authoring: ``authoring`` (the public names), ``dag``, ``tasks``, ``empty``, ``taskflow``
  and ``decorators`` (``@dag``/``@task``), ``task_groups``, ``mapping`` and ``xcom_map``
  (``.expand()``, ``.map()``), ``params``, ``callbacks``, ``assets``, ``deferral``
  (``TaskDeferred`` and the triggers), ``sql_check``
- Checks: ``validation`` (what a DAG file defines), ``task_checks``, ``value_checks``
- Parsing: ``parser`` imports each file in a child process (``_child``); ``loading`` imports
  one DAG file as a module, for the parser's child and a PythonTask's process alike
- Templates: ``templating`` in the ``sandbox``, with ``template_names``,
  ``template_connections``, ``template_sizes`` (budgets), ``render_limits`` and
  ``render_helper`` (the helper process with a memory limit and a deadline)
- XCom on the task side: ``xcom_args`` (placeholders, the result file)
"""
