# The sluice decision service (Envoy's rate limit service API over gRPC, and
# HTTP/JSON): a static binary on a distroless base, running as an
# unprivileged user. Build from the repository root:
#
#   docker build -f deploy/docker/sluice-decision.Dockerfile \
#     --build-arg VERSION=v1.2.3 --build-arg COMMIT=$(git rev-parse --short=12 HEAD) -t sluice-decision:v1.2.3 .
#
# The image serves /etc/sluice/config.yaml (mount yours there; it is watched
# and reloaded), gRPC on 8081 and HTTP (/status, /metrics, /json) on 8080.
FROM golang:1.26-bookworm AS build
ARG VERSION=v0.0.0-dev
ARG COMMIT=unknown
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X github.com/seed-008287da/sluice/internal/buildinfo.version=${VERSION} -X github.com/seed-008287da/sluice/internal/buildinfo.commit=${COMMIT}" \
      -o /out/sluice-decision ./cmd/sluice-decision

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sluice-decision /usr/local/bin/sluice-decision
COPY examples/decision/config.yaml /etc/sluice/config.yaml
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/sluice-decision"]
CMD ["-c", "/etc/sluice/config.yaml", "-grpc", "0.0.0.0:8081", "-http", "0.0.0.0:8080"]
