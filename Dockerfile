# One image for every raftsched process: scheduler, worker, webserver, db/users/cluster admin.
#   docker build -t raftsched:local .
#   docker run --rm raftsched:local --help
# docker-compose.yml runs a whole cluster from it.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    RAFTSCHED_HOME=/var/lib/raftsched

# An unprivileged user owns home (config, Raft journals under data/); DAGs are mounted read-only.
RUN groupadd --system --gid 10001 raftsched \
    && useradd --system --uid 10001 --gid raftsched --home-dir /var/lib/raftsched \
       --create-home --shell /usr/sbin/nologin raftsched \
    && mkdir -p /var/lib/raftsched/data /var/lib/raftsched/dags \
    && chown -R raftsched:raftsched /var/lib/raftsched

WORKDIR /opt/raftsched
# Dependencies first, from pyproject.toml alone, in a layer of their own: it is rebuilt only
# when pyproject.toml changes, not on every code change (tests/deploy/test_dockerfile.py).
# One image runs every process, so it takes the web UI and PostgreSQL extras.
COPY pyproject.toml ./
RUN python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
        extras = p["optional-dependencies"]; \
        print("\n".join(p["dependencies"] + extras["web"] + extras["postgres"]))' \
        > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt
# Then the code: no dependency resolution left to do (--no-deps).
COPY README.md LICENSE ./
COPY raftsched ./raftsched
COPY web ./web
RUN pip install --no-deps '.[web,postgres]' && pip check && raftsched --version

USER raftsched
WORKDIR /var/lib/raftsched
# scheduler: Raft 7101, admin status 7201, gRPC 7301; webserver: 8080
EXPOSE 7101 7201 7301 8080
ENTRYPOINT ["raftsched"]
CMD ["--help"]
