# driftbus service image: `docker build -t driftbus .`; the entry point is the `driftbus` CLI.
FROM python:3.11-slim AS build
RUN pip install --no-cache-dir "uv==0.13.9"
WORKDIR /app
COPY pyproject.toml uv.lock README.md ./
COPY services ./services
COPY schemas ./schemas
COPY examples ./examples
RUN uv sync --locked --no-dev --no-editable

FROM python:3.11-slim
RUN useradd --system --uid 10001 driftbus
COPY --from=build /app/.venv /app/.venv
COPY --from=build /app/examples /app/examples
ENV PATH=/app/.venv/bin:$PATH PYTHONUNBUFFERED=1
USER 10001
ENTRYPOINT ["driftbus"]
CMD ["--help"]
