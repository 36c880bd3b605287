"""The semantic checks of a spec, one module per concern, run by
:mod:`framework.spec.validate`; :mod:`.report` locates each problem to ``file:line:col``.
None reads files or parses YAML (that is :mod:`framework.spec.load`)."""
