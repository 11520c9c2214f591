"""Signals sent by recrawler components (send with ``send_catch_log_async``)."""

from __future__ import annotations

# page, status; ClassifyPipeline after the store write committed the page's new state
page_classified = object()
# run, report; Reconciler after the run was finished in the store and the report built
run_finished = object()
# cause, exit_code, error; any component that finds why the run fails (a refusal, a lost leader):
# the Reconciler alone decides the run's exit code (the most severe cause or finding); error is the
# exception a run refused at start was refused for (None otherwise)
run_failed = object()
# run, reasons ({reason: explanation}), report; Reconciler when it holds a run for an operator
run_held = object()
# requests; UnseenVerifier with a batch of requests checking stored pages the run has not reached
# (an empty batch: none left). The scheduler queues them (FrontierScheduler)
pages_to_check = object()
