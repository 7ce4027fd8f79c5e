# The sluice gateway: a static binary on a distroless base, running as an
# unprivileged user. Build from the repository root:
#
#   docker build -f deploy/docker/sluice.Dockerfile \
#     --build-arg VERSION=v1.2.3 --build-arg COMMIT=$(git rev-parse --short=12 HEAD) -t sluice:v1.2.3 .
#
# The image serves /etc/sluice/kong.yml (mount yours there; it is watched
# and reloaded), the proxy on 8000, /status and /metrics on 8100, and the
# admin API on loopback only (publish it only with an admin token).
FROM golang:1.26-bookworm AS build
ARG VERSION=v0.0.0-dev
ARG COMMIT=unknown
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X github.com/seed-008287da/sluice/internal/buildinfo.version=${VERSION} -X github.com/seed-008287da/sluice/internal/buildinfo.commit=${COMMIT}" \
      -o /out/sluice ./cmd/sluice

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sluice /usr/local/bin/sluice
COPY examples/quickstart/kong.yml /etc/sluice/kong.yml
USER 65532:65532
EXPOSE 8000 8100
ENTRYPOINT ["/usr/local/bin/sluice"]
CMD ["run", "-c", "/etc/sluice/kong.yml", "--proxy-listen", "0.0.0.0:8000", "--status-listen", "0.0.0.0:8100", "--admin-listen", "127.0.0.1:8001"]
