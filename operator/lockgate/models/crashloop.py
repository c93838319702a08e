"""An endpoint in a crash loop: the record every surface shows.

After `crashLoopThreshold` failed worker starts in a row (a container or process that
exited before its first worker-API call, or a worker marked unhealthy at startup or by a
fitness check), the control plane starts no worker for the endpoint until a new release
or a restart. The record lives in the endpoint's registry entry (`RegistryEntry.crashLoop`):
the gateway reads that entry (cached) for every job it takes, so `/run` can say why the
job waits without another Redis call.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

LINE_CHARS = 300  # of the last log line kept


class CrashLoop(BaseModel):
    """Why an endpoint starts no worker: its last failed start."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    failedStarts: int = Field(ge=1)  # in a row, when the loop was declared
    exitCode: int | None = None  # None: marked unhealthy, not exited
    lastLine: str = Field("", max_length=LINE_CHARS)  # its last log line, or the reason
    since: int  # epoch ms
    version: int | None = None  # the release whose workers crashed (None: unknown)

    def text(self) -> str:
        """One line: "workers crash at start (exit code 1: <line>)"."""
        code = f"exit code {self.exitCode}" if self.exitCode is not None else "unhealthy"
        said = f": {self.lastLine}" if self.lastLine else ""
        return f"workers crash at start ({code}{said})"

    def job_message(self, endpoint_id: str) -> str:
        """What the answer to a new job says while the endpoint starts no worker."""
        return (
            f"IN_QUEUE: {self.text()}; see GET /v2/serverless/{endpoint_id}/workers. "
            "No worker starts until a new release or POST "
            f"/v2/serverless/{endpoint_id}/workers/restart"
        )
