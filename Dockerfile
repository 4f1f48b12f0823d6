# An orch worker: python -m workers, polling the task queue "orch" of $TEMPORAL_ADDRESS.
#
#   docker build -t orch-worker .
#   docker run -e TEMPORAL_ADDRESS=temporal.example:7233 orch-worker
#
# No credentials are baked in: mount them read-only (~/.aws, a GCP key file named by
# GOOGLE_APPLICATION_CREDENTIALS) or pass them as variables at run time (see
# docker-compose.temporal.yml and the README's Production section).
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The worker builds the wheel of orch that cloud nodes install from this source tree
# (orch.runtime.install.source_tree), so orch is installed editable from /opt/orch.
WORKDIR /opt/orch
COPY pyproject.toml README.md ./
COPY orch ./orch
COPY workflows ./workflows
COPY activities ./activities
COPY workers ./workers
COPY cli ./cli
RUN pip install --no-compile -e . \
    && useradd --create-home --uid 1000 --shell /usr/sbin/nologin orch \
    && mkdir -p /home/orch/.orch \
    && chown orch:orch /home/orch/.orch

USER orch
WORKDIR /home/orch
# A named volume mounted here takes this directory's owner: orch's SSH key, known hosts
# and wheel cache, shared by the workers that mount it.
ENV ORCH_HOME=/home/orch/.orch

HEALTHCHECK --interval=30s --timeout=30s --start-period=60s --retries=3 \
    CMD ["python", "-m", "workers", "--check"]

ENTRYPOINT ["python", "-m", "workers"]
