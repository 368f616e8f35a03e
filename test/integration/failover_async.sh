#!/bin/bash
# A primary failover under load with asynchronous replication (issue 30),
# on three throwaway clusters of its own: the legacy DBMS (it outlives the
# failover, as a real one would), payflow's primary A, and B, A's
# streaming standby (pg_basebackup -R).  The whole pipeline (the relay, the
# payment, post-processing and invoice workers, payflow-api) runs with the
# host list "A,B" and is never restarted; payments go in through POST
# /payments (failover_common.bash).
#
#   1. 20 payments complete on A; B replays all of it.
#   2. B stops receiving WAL (the lag an asynchronous standby can have);
#      10 more payments are submitted on A, and charged by the legacy DBMS.
#   3. A dies (immediate shutdown, as a crash) and B is promoted: the 10
#      are gone with A, the loss window of asynchronous replication.
#   4. The programs find B by themselves (target_session_attrs=
#      read-write skips the dead host); 5 new payments complete on B.
#   5. payflow.reconcile() on B, given the legacy DBMS's charges and the 35
#      ids the API returned, names exactly the 10 lost: charged but
#      unknown, and ids unknown.  Nothing else; no charge doubled.
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib/cluster.sh
source test/lib/assert.sh
source test/lib/proc.sh

source test/integration/failover_common.bash

# --- 1. on A, replayed by B
submit 1 20
pf_ok "20 payments complete on A" pf_wait_for 60 all_completed a 1 20
lsn=$(a -c "SELECT pg_current_wal_lsn()")
replayed() { [ "$(b -c "SELECT pg_last_wal_replay_lsn() >= '$lsn'::pg_lsn")" = t ]; }
pf_ok "B replayed all of it" pf_wait_for 30 replayed

# --- 2. B falls behind; 10 more on A, charged
cut_replication
submit 21 30
pf_ok "10 more payments complete on A" pf_wait_for 60 all_completed a 21 30
pf_ok "... charged by the legacy DBMS" charged 21 30

# --- 3. A dies, B is promoted
fail_over
pf_eq "the 10 written after B fell behind are gone with A" 0 \
	"$(b -c "SELECT count(*) FROM payflow.operations WHERE payment_id IN (SELECT '$run-' || g FROM generate_series(21, 30) g)")"

# --- 4. the edge programs follow without a restart
submit 31 35
pf_ok "5 new payments complete on B, with the same programs" pf_wait_for 90 all_completed b 31 35
pf_ok "the relay, the three workers and the API still run (never restarted)" programs_running

# --- 5. reconciliation names the lost ones, and only them
reconcile_findings
pf_eq "findings: 10 charges unknown and 10 ids unknown, nothing else" "charge_unknown 10|id_unknown 10" \
	"$(awk '{n[$1]++} END {for (f in n) print f, n[f]}' "$work/findings" | sort | paste -sd'|')"
lost_payments=$(for g in $(seq 21 30); do echo "$run-$g"; done)
pf_eq "the charges unknown are the 10 lost payments" "$lost_payments" \
	"$(awk '$1 == "charge_unknown" {print $2}' "$work/findings" | sort -V)"
lost_ids=$(sed -n '21,30p' "$work/ids" | sort)
pf_eq "the ids unknown are the 10 returned for them" "$lost_ids" \
	"$(awk '$1 == "id_unknown" {print $2}' "$work/findings" | sort)"
pf_eq "no payment charged twice" 0 "$(legacy -c "SELECT count(*) FROM duplicate_charges()")"
pf_ok "35 invoices, none twice" invoices_once 35
pf_done
