"""Studies: a grid of replay runs (trace settings x device x hints x parameters x seeds) to a table, plots
and a report, on local processes or a Ray cluster, resumably. :mod:`~testbed.study.spec` parses a spec,
:mod:`~testbed.study.run` runs it, :mod:`~testbed.study.table` tabulates it, :mod:`~testbed.study.findings`
and :mod:`~testbed.study.plots` read the table, and :mod:`~testbed.study.report` writes them out;
``kvbed study`` is the command line."""
