# driftbus service image: `docker build -t driftbus .`; the entry point is the `driftbus` CLI.
FROM python:3.11-slim AS build
RUN pip install --no-cache-dir "uv==0.13.9"
WORKDIR /app
COPY pyproject.toml uv.lock README.md ./
COPY services ./services
COPY schemas ./schemas
COPY examples ./examples
RUN uv sync --locked --no-dev --no-editable

# sops, for the applier: it decrypts SOPS-encrypted Secrets just before applying them
# (docs/secrets.md); built from the module pinned in tools/go/sops, as `make assets` builds it
FROM golang:1.26 AS tools
COPY tools/go/sops /tools/sops
RUN cd /tools/sops && CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" GOTOOLCHAIN=local \
    go build -trimpath -ldflags "-s -w" -o /out/sops github.com/getsops/sops/v3/cmd/sops

FROM python:3.11-slim
RUN useradd --system --uid 10001 driftbus
COPY --from=tools /out/sops /usr/local/bin/sops
COPY --from=build /app/.venv /app/.venv
COPY --from=build /app/examples /app/examples
ENV PATH=/app/.venv/bin:$PATH PYTHONUNBUFFERED=1
USER 10001
ENTRYPOINT ["driftbus"]
CMD ["--help"]
