"""The maintenance jobs ("dreaming"): each plans, then applies its plan with a record.

``secretary.jobs.runner.run_job`` runs one job on one namespace; ``runner.JOBS`` holds them by
name. The names are repeated here so that the CLI can list them without importing the jobs.
"""

# In the order a cycle runs them: new memories first, then links, audit, traits, summaries.
JOB_NAMES = ("extractor", "linker", "auditor", "soul_mapper", "consolidator", "retention")
