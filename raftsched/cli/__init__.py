"""raftsched.cli: the ``raftsched`` command (``main``); each area registers its subcommands
from a module of its own (``<area>_cmd``).

- ``cluster_cmd`` (``scheduler``, ``cluster ...``), ``rebuild_cmd``, ``standalone_cmd``,
  ``worker_cmd``, ``triggerer_cmd``, ``webserver_cmd``, ``db_cmd``, ``debug_cmd``: processes
  and operations
- ``dags_cmd``, ``dags_local_cmd``, ``dags_show_cmd``, ``dags_test_cmd`` (with
  ``dags_test_callbacks``), ``runs_cmd``, ``tasks_cmd``, ``tasks_render_cmd``,
  ``assets_cmd``, ``pools_cmd``, ``workers_cmd``, ``audit_cmd``: what the cluster holds
- ``variables_cmd``, ``secrets_io_cmd``, ``users_cmd``: secrets and accounts
- ``common`` (argparse types, log set-up), ``connect`` (reaching the cluster, failures as
  one line), ``output`` (tables for people, JSON for scripts)
"""
