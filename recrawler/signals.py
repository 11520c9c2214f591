"""Signals sent by recrawler components (send with ``send_catch_log_async``)."""

from __future__ import annotations

# page, status; ClassifyPipeline after the store write committed the page's new state
page_classified = object()
# run, report; Reconciler after the run was finished in the store and the report built
run_finished = object()
# cause, exit_code; any component that finds why the run fails (a refusal, a lost leader): the
# Reconciler alone decides the run's exit code (the most severe cause or finding)
run_failed = object()
# run, reasons ({reason: explanation}), report; Reconciler when it holds a run for an operator
run_held = object()
