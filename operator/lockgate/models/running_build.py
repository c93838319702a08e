"""Which build an endpoint's workers run (pure): a completed build taken as the endpoint's
(docs/builds.md, "What the workers run").

A build runs only once it is COMPLETED (with an image on a cluster): a FAILED, CANCELLED,
TEST_FAILED or live build never changes what runs. The build the workers run is part of
the release configuration (`models.releases.ReleaseConfig.build`), so taking one is a
release (`GIT_BUILD`) and a rollback to that release runs it again, with no rebuild.

- `RunningBuild`: the build the workers run: its id, the source URL it was built from,
  and what runs: `image` (`imageName@imageDigest`, a cluster) or `folder` and `command`
  (dev mode's copy of the checkout);
- `running_of_completed`: the `RunningBuild` of a cluster's completed build, else None;
- `to_take`: which completed build (if any) a cluster takes now;
- `applies`, `worker_image`: whether a running build is the endpoint's now, and the image
  its worker containers run.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lockgate.models.build import Build, BuildStatus
from lockgate.models.source import EndpointSource, source_of


class RunningBuild(BaseModel):
    """A build the workers run (or ran: a release keeps it for a rollback)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    buildId: str
    url: str = Field(..., description="the source's URL it was built from")
    image: str | None = Field(None, description="a cluster's: imageName@imageDigest")
    folder: str | None = Field(None, description="dev mode's: its copy of the checkout")
    command: tuple[str, ...] = Field((), description="dev mode's: the worker command")

    def view(self) -> dict[str, Any]:
        """As a release's diff shows it."""
        return {"buildId": self.buildId, "image": self.image}

    def encoded(self) -> str:
        """As JSON (the Endpoint's annotation on a cluster)."""
        return orjson.dumps(self.model_dump(mode="json", exclude_defaults=True)).decode()


def decoded(raw: str | None) -> RunningBuild | None:
    """A `RunningBuild` from its JSON; None when absent or not one (a hand-edited
    annotation: the template's image runs, as without one)."""
    if not raw:
        return None
    try:
        return RunningBuild.model_validate_json(raw)
    except ValidationError:
        return None


def image_of(build: Build) -> str | None:
    """What a cluster's build pushed, by digest: `imageName@imageDigest`; None unless it
    COMPLETED with both."""
    if build.status != BuildStatus.COMPLETED or not build.imageName or not build.imageDigest:
        return None
    name = build.imageName.rsplit("@", 1)[0]
    return f"{name}@{build.imageDigest}"


def running_of_completed(build: Build, url: str) -> RunningBuild | None:
    """The `RunningBuild` of a cluster's build of the source at `url`: only a COMPLETED
    build with its image and digest; None for any other (a failed or TEST_FAILED build
    never changes what runs)."""
    image = image_of(build)
    return None if image is None else RunningBuild(buildId=build.id, url=url, image=image)


def to_take(builds: Iterable[tuple[int, Build]], taken: int) -> tuple[int, Build] | None:
    """Which build a cluster's workers take now, from the endpoint's builds with their
    sequence numbers: the newest COMPLETED one with an image whose number is above
    `taken` (the newest number taken before). So a build finishing after a newer one was
    taken is not run, and a rollback to an older build (which leaves `taken` as it is)
    is not undone by the next reconcile. None: nothing new to run. A `taken` above every
    build's number means the numbering restarted (lockgate's Redis was emptied, its
    builds with it): it counts as none taken, or no build would ever run again."""
    builds = list(builds)
    if builds and taken > max(seq for seq, _ in builds):
        taken = 0
    fresh = [(seq, b) for seq, b in builds if seq > taken and image_of(b) is not None]
    return max(fresh, key=lambda pair: pair[0]) if fresh else None


def applies(source: EndpointSource | dict[str, Any] | None, running: RunningBuild | None) -> bool:
    """Whether `running` is what the endpoint runs: while the endpoint has a source of the
    URL it was built from (removing the source, or pointing it at another repository, goes
    back to the template's image until a build of it completes)."""
    found = source_of(source)
    return running is not None and found is not None and found.git.url == running.url


def worker_image(
    template_image: str,
    source: EndpointSource | dict[str, Any] | None,
    running: RunningBuild | None,
) -> str:
    """The image the worker containers run: the running build's, by digest, when it
    applies; else the template's."""
    if running is not None and running.image and applies(source, running):
        return running.image
    return template_image
