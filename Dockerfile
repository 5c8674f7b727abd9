# toolgate's container image (SPEC S3): slim, non-root, prompt_guard's compiled scorer and its
# shipped models included. Used by deploy/compose.yaml; checked against it by
# tests/unit/test_deploy.py. Not built on the development machine (no Docker daemon there).
#
#   docker build -t toolgate .
#   docker run -p 8080:8080 -v ./toolgate.yaml:/etc/toolgate/toolgate.yaml:ro toolgate

# -- build: a C compiler for plugins/prompt_guard/_native.c, the package and its pinned dependencies
FROM python:3.11-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/toolgate
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY gateway ./gateway
COPY plugins ./plugins
# the check runs outside /src, so it imports the installed package (a missing compiled scorer fails the build)
RUN /opt/toolgate/bin/pip install --no-cache-dir . \
    && cd / && /opt/toolgate/bin/python -c "import plugins.prompt_guard._native"

# -- run: the virtual environment only, as an unprivileged user
FROM python:3.11-slim
RUN useradd --system --uid 10001 --home-dir /var/lib/toolgate --create-home toolgate
COPY --from=build /opt/toolgate /opt/toolgate
ENV PATH=/opt/toolgate/bin:$PATH PYTHONUNBUFFERED=1
USER toolgate
WORKDIR /var/lib/toolgate
EXPOSE 8080
HEALTHCHECK --interval=5s --timeout=2s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/readyz', timeout=2).status != 200)"]
CMD ["toolgate", "serve", "--config", "/etc/toolgate/toolgate.yaml", "--host", "0.0.0.0", "--port", "8080"]
