"""Kept so the import path earlier READMEs showed keeps working: `farm.jobs.job_client`.
The `farm cluster` code lives in farm.cli.cluster."""

from farm.cli.cluster import job_client

__all__ = ["job_client"]
