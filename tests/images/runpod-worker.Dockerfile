# A worker image the way a RunPod user builds one: a Python image, the official `runpod`
# SDK from PyPI (no lockgate inside) and a handler that calls runpod.serverless.start().
# The tests run it against lockgate's worker API: an unchanged RunPod worker must work.
# Build with tests/workers as the context (its handlers: runpod_echo.py, the default
# command, runpod_stream.py, runpod_probe.py, runpod_volume.py, …):
#   docker build -f tests/images/runpod-worker.Dockerfile \
#     -t localhost/lockgate-test/runpod-worker:dev tests/workers
# hack/images.sh builds it offline: a local base image, PIP_NO_INDEX=1 and PIP_FIND_LINKS
# pointing at a wheelhouse (unset, the default, they change nothing), and RUNPOD_REQUIREMENT
# read from pyproject.toml's test extra.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
FROM ${PYTHON_IMAGE}
ARG PIP_NO_INDEX
ARG PIP_FIND_LINKS
ARG RUNPOD_REQUIREMENT="runpod>=1.7"
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
# A virtualenv: it works on any Python image, Debian's included (whose system Python
# refuses pip installs, PEP 668).
RUN python -m venv /opt/venv && /opt/venv/bin/pip install "$RUNPOD_REQUIREMENT"
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /app
COPY *.py /app/
CMD ["python", "-u", "/app/runpod_echo.py"]
