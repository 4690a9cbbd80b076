# The Trialog image: one image for every service, chosen by the command.
#
#   docker build -t trialog:0.1.0 .
#   docker run --rm trialog:0.1.0 serve orchestrator --help
#
# The builder stage installs Trialog with the extras of every service the chart can run
# (hosted environments, the Parquet datalog, learners, the web gateway, the analytics jobs) into a
# virtualenv; the final stage copies
# only that virtualenv onto the same slim Python, so no compiler, pip cache or
# source tree ships.

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN python -m venv /opt/trialog

WORKDIR /src
# Only what the wheel is built from (see .dockerignore), so edits to tests,
# docs or the chart never rebuild the image.
COPY pyproject.toml README.md ./
COPY schemas ./schemas
COPY examples ./examples
COPY presets ./presets
COPY services ./services
COPY trialog ./trialog
RUN /opt/trialog/bin/pip install --no-cache-dir ".[envs,datalog,learn,gateway,analytics]"


FROM ${PYTHON_IMAGE}

LABEL org.opencontainers.image.title="trialog" \
      org.opencontainers.image.description="Multi-agent RL trials carried and logged by Apache Kafka" \
      org.opencontainers.image.licenses="Apache-2.0"

# A fixed numeric uid, so Kubernetes' runAsNonRoot can check it without a passwd lookup.
RUN groupadd --system --gid 10001 trialog \
 && useradd --system --uid 10001 --gid 10001 --create-home --home-dir /home/trialog --shell /usr/sbin/nologin trialog

COPY --from=builder /opt/trialog /opt/trialog

# pip compiled the bytecode at install time; a read-only root filesystem must
# not be written to at run time, and the logs go to stdout unbuffered.
ENV PATH=/opt/trialog/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TRIALOG_LOG_FORMAT=json \
    TRIALOG_HEALTH_HOST=0.0.0.0

USER 10001:10001
WORKDIR /home/trialog

# Health endpoints (/livez, /readyz) of every `trialog serve ...` command.
EXPOSE 8080

ENTRYPOINT ["trialog"]
CMD ["--help"]
