#!/usr/bin/env bash
# Does real TensorFlow Serving serve our export, and answer exactly as the local server does?
#
#   serving/deploy/verify_tf_serving.sh [--export BASE_PATH]
#
# 1. exports a small model: `keras-transformer demo` (trains on the built-in data), unless
#    --export names an existing model base path (the directory holding <version>/);
# 2. starts the pinned tensorflow/serving image with docker compose: docker-compose.yml next to
#    this script (models.config, batching and monitoring files mounted), the export mounted at
#    /models/translator, gRPC on 8500 and REST on 8501 of this machine;
# 3. starts the local server (`python -m serving`) on the same export with the same flags and
#    files (`python -m serving.compose_flags`), on two free ports;
# 4. sends both the same requests over REST and gRPC (`python -m serving.verify`), printing
#    every difference; stops both servers on exit.
#
# Exit status: 0 same answers, 1 differences found, 2 could not compare (no Docker daemon or
# compose plugin, a server that did not start). Environment: PYTHON (default .venv/bin/python),
# WAIT_SECONDS (how long to wait for both to load the model, default 600).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
WAIT_SECONDS=${WAIT_SECONDS:-600}
MODEL=translator
EXPORT=

fail() {  # message, exit status
  echo "verify_tf_serving: $1" >&2
  exit "$2"
}

while (($#)); do
  case $1 in
    --export) [[ $# -ge 2 ]] || fail "--export needs a directory" 2; EXPORT=$2; shift 2 ;;
    -h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) fail "unknown argument $1 (see --help)" 2 ;;
  esac
done

command -v docker >/dev/null 2>&1 ||
  fail "docker is not installed here, so real TensorFlow Serving cannot run; nothing compared" 2
docker info >/dev/null 2>&1 ||
  fail "the Docker daemon is not reachable (docker info failed), so real TensorFlow Serving cannot run; nothing compared" 2
docker compose version >/dev/null 2>&1 ||
  fail "the docker compose plugin is missing (docker compose version failed); nothing compared" 2
if [[ -n $EXPORT ]]; then
  [[ -d $EXPORT ]] || fail "--export $EXPORT is not a directory" 2
  EXPORT=$(cd "$EXPORT" && pwd)
fi

WORK=$(mktemp -d)
chmod 755 "$WORK"  # the container reads the export from here
PROJECT=kt-verify-$$
COMPOSE=(docker compose -p "$PROJECT" -f "$HERE/docker-compose.yml" -f "$WORK/export.yml")
LOCAL_PID=
cleanup() {
  if [[ -n $LOCAL_PID ]]; then
    kill -TERM "$LOCAL_PID" 2>/dev/null || true
    wait "$LOCAL_PID" 2>/dev/null || true
  fi
  "${COMPOSE[@]}" down --volumes --remove-orphans >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

if [[ -z $EXPORT ]]; then
  echo "== exporting a small model (keras-transformer demo) into $WORK/demo"
  "$PYTHON" -m keras_transformer demo --workdir "$WORK/demo" ||
    fail "exporting the demo model failed; nothing compared" 2
  EXPORT=$WORK/demo/models/demo_translator
fi

echo "== starting TensorFlow Serving (docker compose, $HERE/docker-compose.yml) on $EXPORT"
# Compose merges bind mounts by container path: this replaces ../../models/translator.
cat >"$WORK/export.yml" <<EOF
services:
  $MODEL:
    volumes:
      - "$EXPORT:/models/$MODEL:ro"
EOF
"${COMPOSE[@]}" up -d || fail "docker compose up failed; nothing compared" 2

echo "== starting the local server on $EXPORT"
FLAGS_TEXT=$("$PYTHON" -m serving.compose_flags "$HERE/docker-compose.yml" \
  --workdir "$WORK/config" --mount "/models/$MODEL=$EXPORT") ||
  fail "could not read the compose service's flags; nothing compared" 2
mapfile -t FLAGS <<<"$FLAGS_TEXT"
PORTS=$("$PYTHON" -c 'from serving.process import free_port; print(free_port(), free_port())') ||
  fail "could not find free ports for the local server" 2
read -r GRPC_PORT REST_PORT <<<"$PORTS"
(cd "$ROOT" && exec "$PYTHON" -m serving --port="$GRPC_PORT" --rest_api_port="$REST_PORT" \
  "${FLAGS[@]}") >"$WORK/local.log" 2>&1 &
LOCAL_PID=$!

echo "== comparing: left = TensorFlow Serving (8501, 8500), right = local ($REST_PORT, $GRPC_PORT)"
STATUS=0
"$PYTHON" -m serving.verify --model "$MODEL" --wait "$WAIT_SECONDS" \
  --left-rest http://127.0.0.1:8501 --left-grpc 127.0.0.1:8500 \
  --right-rest "http://127.0.0.1:$REST_PORT" --right-grpc "127.0.0.1:$GRPC_PORT" || STATUS=$?
if ((STATUS != 0)); then
  echo "== TensorFlow Serving's log (last 40 lines)"
  "${COMPOSE[@]}" logs --no-color --tail 40 || true
  echo "== the local server's log (last 40 lines)"
  tail -n 40 "$WORK/local.log" || true
fi
exit "$STATUS"
