"""The LLM layer: litellm calls with structured output, retries, usage and token budgets.

- ``settings``: the ``[llm]`` section;  ``usage``: tokens and cost of calls;
- ``errors``: what a call can fail with;  ``budget``: per-run and per-day token allowances and
  the one ledger that counts a day's tokens;
- ``client``: ``LlmClient`` (litellm is imported on first use: importing it takes seconds).
"""
