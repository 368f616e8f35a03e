#!/bin/bash
# A primary failover under load with synchronous replication (issue 30):
# the same three clusters and edge programs as failover_async.sh
# (failover_common.bash), with A waiting for B at each commit
# (synchronous_standby_names = '*').
#
#   1. 20 payments complete on A.
#   2. 10 more are submitted (their ids are returned: B has them) and
#      claimed; B stops receiving while their legacy calls run and charge:
#      every commit on A from then on waits (their completions too), and
#      is never acknowledged.
#   3. A crashes and B is promoted.
#   4. The programs, never restarted, go on on B: every one of
#      the 30 operations whose id was returned completes there, each
#      charged once (a step taken over runs its call again with the same
#      idempotency key: the legacy DBMS returns the first charge), and
#      payflow.reconcile() finds nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/lib/cluster.sh
source test/lib/assert.sh
source test/lib/proc.sh

source test/integration/failover_common.bash

a -c "ALTER SYSTEM SET synchronous_standby_names = '*'" -c "SELECT pg_reload_conf()" >/dev/null
sync_standby() { [ "$(a -c "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'")" = 1 ]; }
pf_ok "B is A's synchronous standby" pf_wait_for 30 sync_standby

# --- 1.
submit 1 20
pf_ok "20 payments complete on A" pf_wait_for 60 all_completed a 1 20

# --- 2. returned, claimed, in their legacy calls (5 s each) when B stops:
# from then on every commit on A waits, their completions included
legacy -c "SELECT set_fault('slow', seconds => 5, count => 10, fn => 'charge')" >/dev/null
submit 21 30
pf_eq "the 10 ids are returned" 30 "$(grep -c . "$work/ids")"
calling() { [ "$(legacy -c "SELECT count(*) FROM call_log WHERE fn = 'charge' AND ended_at IS NULL")" -ge 1 ]; }
pf_ok "their legacy calls run" pf_wait_for 30 calling
cut_replication
some_charged() { [ "$(legacy -c "SELECT count(*) FROM charges WHERE payment_id IN (SELECT '$run-' || g FROM generate_series(21, 30) g)")" -ge 1 ]; }
pf_ok "the legacy DBMS charges some of them meanwhile" pf_wait_for 30 some_charged
pf_eq "none of them completes on A (their commits wait for B)" 0 "$(completed a 21 30)"

# --- 3.
fail_over
pf_eq "B has every operation whose id was returned" 30 \
	"$(b -c "SELECT count(*) FROM payflow.operations WHERE payment_id IN (SELECT '$run-' || g FROM generate_series(1, 30) g)")"

# --- 4.
pf_ok "all 30 complete on B, with the same programs" pf_wait_for 120 all_completed b 1 30
pf_ok "... each charged" charged 1 30
pf_eq "no payment charged twice" 0 "$(legacy -c "SELECT count(*) FROM duplicate_charges()")"
pf_ok "30 invoices, none twice" invoices_once 30
pf_ok "the relay, the three workers and the API still run (never restarted)" programs_running
reconcile_findings
pf_eq "reconcile() finds nothing" 0 "$(grep -c . "$work/findings" || true)"
pf_done
