#!/bin/bash
# Storage v2, phase 6 (issue 25): would internal keys as uuid pay?  The
# operation's id is 'pay_' + a ULID, 31 bytes as text; the same 128 bits
# are 16 as uuid.  Every row and index entry that names the operation
# carries it: its own row and four indexes, six history rows and their
# key, three step rows and their key, four outbox log rows and their index
# (test/bench/id_width.sql writes them as one operation's life does: an
# insert of each, three status updates, the terminal one not HOT).  The
# two key types in one cluster, rounds interleaved, medians; WAL bytes per
# operation.  Prints figures, never fails on them.
#
#   BENCH_ID_OPS=5000  BENCH_ID_ROUNDS=3  PF_BENCH_ID_PGPORT=54355
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/bench/lib.sh
export PF_PGPORT=${PF_BENCH_ID_PGPORT:-54355} PF_FLAVOUR=c
export PF_CLUSTER_DIR=/tmp/payflow-bench-id-$PF_PGPORT
source test/lib/cluster.sh

N=${BENCH_ID_OPS:-5000}
ROUNDS=${BENCH_ID_ROUNDS:-3}

bench_build
pf_cluster_destroy
trap 'pf_cluster_destroy' EXIT
pf_cluster_start
for kind in text uuid; do
	# the key type and how a new one is made: a text id of today's shape,
	# or the uuid of the same width as the ULID
	if [ "$kind" = text ]; then
		domain="CREATE DOMAIN id_key AS text COLLATE \"C\""
		new_id="'pay_' || upper(substr(md5(random()::text), 1, 26))"
	else
		domain="CREATE DOMAIN id_key AS uuid"
		new_id="gen_random_uuid()"
	fi
	pf_psql -qAt >/dev/null <<-SQL
		CREATE SCHEMA id_$kind;
		SET search_path = id_$kind;
		$domain;
		CREATE FUNCTION new_id() RETURNS id_key LANGUAGE sql VOLATILE AS \$\$ SELECT ($new_id)::id_key \$\$;
		CREATE TABLE operations (
			id id_key PRIMARY KEY, tenant text COLLATE "C" NOT NULL, payment_id text COLLATE "C" NOT NULL,
			idempotency_key text COLLATE "C" NOT NULL, request_ref jsonb NOT NULL,
			created_at timestamptz NOT NULL DEFAULT now(), status text NOT NULL DEFAULT 'PENDING',
			updated_at timestamptz NOT NULL DEFAULT now(), terminal_at timestamptz,
			UNIQUE (tenant, idempotency_key)) WITH (fillfactor = 80);
		CREATE INDEX ON operations (tenant, id);
		CREATE INDEX ON operations (payment_id, id);
		CREATE INDEX ON operations (id) WHERE terminal_at IS NULL;
		CREATE INDEX ON operations (terminal_at) WHERE terminal_at IS NOT NULL;
		CREATE TABLE history (operation_id id_key NOT NULL, id bigint GENERATED ALWAYS AS IDENTITY,
			to_status text NOT NULL, at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (operation_id, id));
		CREATE TABLE steps (operation_id id_key NOT NULL, step_name text NOT NULL, status text NOT NULL DEFAULT 'PENDING',
			PRIMARY KEY (operation_id, step_name));
		CREATE TABLE events (seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, operation_id id_key NOT NULL,
			created_at timestamptz NOT NULL DEFAULT now(), body jsonb NOT NULL DEFAULT '{"paymentId": "p", "attempt": 1}');
		CREATE INDEX ON events (operation_id);
	SQL
done

echo "== operation ids as text or as uuid: WAL per operation ($N operations a round, $ROUNDS rounds)"
declare -A WAL
for round in $(seq 1 "$ROUNDS"); do
	for kind in $(bench_rotate "$round" text uuid); do
		out=$(pf_psql -qAt -v kind="$kind" -c "SET bench.n = $N" -c "SET bench.run = 'r$round'" \
			-f test/bench/id_width.sql 2>&1 | tail -n 1)
		WAL[$kind]+="$(awk -v o="$out" 'BEGIN { split(o, f, " "); printf "%.0f", f[1] / f[2] }') "
	done
done
text=$(bench_med "${WAL[text]}")
uuid=$(bench_med "${WAL[uuid]}")
printf '%-8s %12s\n' "key" "WAL B/op"
printf '%-8s %12s\n' text "$text" uuid "$uuid"
echo "uuid/text: $(bench_ratio "$uuid" "$text") (rounds: text [${WAL[text]% }] uuid [${WAL[uuid]% }])"
bench_result id_width_wal_text "${WAL[text]}"
bench_result id_width_wal_uuid "${WAL[uuid]}"
