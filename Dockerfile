# Keel's services (orchestrator, worker, `keel topics create`) as one image; see
# docker-compose.yml. Only what the package needs is copied, then installed as a wheel.
FROM python:3.11-slim
WORKDIR /src
COPY pyproject.toml README.md ./
COPY avro/ avro/
COPY orchestrator/ orchestrator/
COPY handlers/ handlers/
COPY connectors/ connectors/
COPY ops/ ops/
RUN pip install --no-cache-dir . \
    && rm -rf /src \
    && useradd --create-home --uid 10001 keel
WORKDIR /home/keel
USER keel
ENTRYPOINT ["keel"]
CMD ["--help"]
