#!/bin/sh
# Triton of the compose topology: the command given (tritonserver and its flags) with the model-repository,
# logging and trace APIs restricted, over HTTP and gRPC, to requests that carry the admin key (header
# admin-key). The key comes from TRITON_ADMIN_KEY_FILE (init writes it into the triton-admin volume, which only
# Triton, the Airflow workers, the reconciler and the scaler mount); without it Triton does not start.
#   triton-serve tritonserver --model-repository=... ...
set -eu
key_file=${TRITON_ADMIN_KEY_FILE:-/etc/modelops/triton-admin/admin-key}
[ -s "$key_file" ] || { echo "triton-serve: no admin key at $key_file (written by the init service)" >&2; exit 1; }
restricted="model-repository,logging,trace:admin-key=$(cat "$key_file")"
exec "$@" --http-restricted-api="$restricted" --grpc-restricted-protocol="$restricted"
