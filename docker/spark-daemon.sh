#!/bin/sh
# A Spark standalone daemon of the compose topology (the project image's pyspark spark-class):
#   modelops-spark master ARGS...          org.apache.spark.deploy.master.Master ARGS
#   modelops-spark worker MASTER_URL ARGS...  org.apache.spark.deploy.worker.Worker, bound to (and advertising)
#                                          its address on the network it shares with the master
# RPC authentication with the shared secret of MODELOPS_SPARK_AUTH_SECRET_FILE (written by init; handed to
# the JVM in its environment, never on a command line); the UIs' kill links off (they have no login).
set -eu
role=$1
shift
secret_file=${MODELOPS_SPARK_AUTH_SECRET_FILE:-/etc/modelops/spark-auth/secret}
[ -s "$secret_file" ] || { echo "spark-daemon: no Spark secret at $secret_file (written by the init service)" >&2; exit 1; }
_SPARK_AUTH_SECRET=$(cat "$secret_file")
export _SPARK_AUTH_SECRET
SPARK_DAEMON_JAVA_OPTS="-Dspark.authenticate=true -Dspark.ui.killEnabled=false ${SPARK_EXTRA_DAEMON_OPTS:-}"
export SPARK_DAEMON_JAVA_OPTS
case "$role" in
  master) exec spark-class org.apache.spark.deploy.master.Master "$@" ;;
  worker)
    master=$1
    hostport=${master#spark://}
    # The master, the drivers and the other executors reach this worker (and its executors) at this address.
    address=$(python -m modelops.discovery "${hostport%:*}" "${hostport##*:}")
    exec spark-class org.apache.spark.deploy.worker.Worker --host "$address" "$@" ;;
  *) echo "usage: $0 master|worker ARGS..." >&2; exit 2 ;;
esac
