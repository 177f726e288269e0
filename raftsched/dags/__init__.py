"""raftsched.dags: the authoring API (``authoring``, checks in ``validation``) and the DAG file
parser (``parser``, which imports each file in a child process, ``_child``)."""
