"""raftsched.core: the replicated state machine, pure and deterministic (no network, DB, thread
or clock; tests/unit/test_layering.py holds it to a stdlib allowlist, croniter and
raftsched.errors). Everything in it is applied identically on every node.

- State and apply: ``state`` (``SchedulerState``; ``apply`` is its only mutator),
  ``command_table`` (command -> handler), ``commands``, ``pool_commands``,
  ``asset_commands`` (the inputs), ``results`` (the answers), ``validate``,
  ``validate_specs`` (every command checked before apply), ``limits`` (every bound)
- Handlers: ``handlers_dags``, ``handlers_runs``, ``handlers_tasks``, ``handlers_marks``,
  ``handlers_triggers``, ``handlers_callbacks``, ``handlers_assets``, ``handlers_pools``,
  ``handlers_secrets``, with ``transitions``, ``run_ending``, ``run_timeout``, ``past_deps``,
  ``dagrun_trigger``, ``mapping``, ``xcom``, ``callbacks``, ``secret_reads``
- Owners of the state: ``catalog`` (DAGs and specs), ``run_table``, ``task_queue``,
  ``trigger_table``, ``callback_table``, ``pool_table``, ``asset_table``, ``secret_table``
  (with ``secret_policy``), ``persisted``, ``request_memory``, ``audit``, ``outbox`` (with
  ``rows``, ``changes``)
- Scheduling maths: ``timetable``, ``timetable_base``, ``timetable_cron``, ``timetable_dst``,
  ``due``, ``slot_policy``, ``skip_causes``, ``run_terms``, ``ready``, ``asset_condition``
- Reads: ``state_views``, ``asset_views``, ``explain``
- Model, snapshots and versions: ``model`` (pickled by module path: never move its classes),
  ``added_fields``, ``digest``, ``snapshot``, ``snapshot_share``, ``restore_decode``,
  ``versions``, ``versions_baseline`` (release 2, generated)
"""
