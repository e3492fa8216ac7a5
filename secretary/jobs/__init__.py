"""The maintenance jobs ("dreaming"): each plans, and its plan is applied with a record.

- ``base``: plans, the ``Job`` interface and the plan skeleton most jobs share;
- ``context``: what a run is given (``JobContext``) and its LLM accounting (``LlmCalls``);
- ``guardrails``, ``clustering``: pure functions over values;  ``neighbours``: similar memories;
- one module per job;  ``registry``: every job by name;  ``settings``: ``[jobs]``, ``[guardrails]``.

Running a job (guardrails, records, approval) is ``secretary.runner``'s.
"""
