#!/bin/bash
# The fault runner (test/soak/run.sh) for about two minutes with a fixed
# seed: the whole pipeline under a steady stream of submissions while the
# relay and every worker role are killed with -9, PostgreSQL and the SQS
# emulator are stopped and restarted, both external systems misbehave and
# duplicate and poison messages reach the queues; then every invariant
# (nothing lost, nothing charged or invoiced twice, nothing left behind by
# purge, every dead letter accounted for) must hold.
#
# It runs on its own cluster and ports, not make check's: it restarts
# PostgreSQL with -m immediate.  Ports: SOAK_SHORT_PGPORT (54540),
# SOAK_SHORT_EMULATOR_PORT (4900, back end 4901), SOAK_SHORT_INVOICE_PORT
# (4902); make soak defaults to others (test/soak/run.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."

SOAK_PGPORT=${SOAK_SHORT_PGPORT:-54540} \
SOAK_CLUSTER_DIR=${SOAK_SHORT_CLUSTER_DIR:-/tmp/pf-soak-cluster} \
SOAK_EMULATOR_PORT=${SOAK_SHORT_EMULATOR_PORT:-4900} \
SOAK_INVOICE_PORT=${SOAK_SHORT_INVOICE_PORT:-4902} \
SOAK_DIR=${SOAK_SHORT_DIR:-/tmp/pf-soak-short} \
SOAK_DRAIN_SECONDS=180 \
	exec test/soak/run.sh --seed "${SOAK_SHORT_SEED:-20261130}" --minutes "${SOAK_SHORT_MINUTES:-2}" \
		--rate "${SOAK_SHORT_RATE:-5}" --no-build
