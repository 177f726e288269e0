"""raftsched.dags: the authoring API (``authoring``, checks in ``validation``) and the DAG file
parser (``parser``, which imports each file in a child process, ``_child``); ``loading``
imports one DAG file as a module, for the parser's child and a PythonTask's process alike."""
