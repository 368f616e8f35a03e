# test/soak/sampler.bash — samples the size of payflow's tables over the run
# and purges in between pg_cron's runs.  Sourced; run soak_sampler in the
# background and create $SOAK_DIR/stop-sampler to end it.
#
#   soak_sampler SAMPLE_S PURGE_S
#
# Samples go to sizes.tsv (the database may be down, a file is not):
# at, table, total bytes (heap + indexes + TOAST), index bytes, live rows,
# dead rows; and a line "~oldest transaction" whose total is the age in
# seconds of the oldest open transaction (which keeps vacuum from reclaiming
# what purge deleted).  Purge answers go to purge.log.

soak_sample_sizes() {
	pf_psql -AtqF $'\t' -c "
		SELECT now(), c.relname,
			   pg_total_relation_size(c.oid), pg_indexes_size(c.oid),
			   coalesce(s.n_live_tup, 0), coalesce(s.n_dead_tup, 0)
		  FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
		 WHERE c.relkind = 'r'
		   AND (c.relnamespace = 'payflow'::regnamespace
				OR (c.relnamespace = 'cron'::regnamespace AND c.relname = 'job_run_details'))
		UNION ALL
		SELECT now(), '~oldest transaction',
			   coalesce(extract(epoch FROM now() - min(xact_start))::bigint, 0), 0, 0, 0
		  FROM pg_stat_activity WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()
		 ORDER BY 2" >>"$SOAK_DIR/sizes.tsv" 2>/dev/null
}

soak_sampler() {
	local sample_s=$1 purge_s=$2 next_sample=0 next_purge=$SECONDS
	next_purge=$((SECONDS + purge_s))
	while [ ! -e "$SOAK_DIR/stop-sampler" ]; do
		if [ $SECONDS -ge $next_sample ]; then
			soak_sample_sizes || true
			next_sample=$((SECONDS + sample_s))
		fi
		if [ $SECONDS -ge $next_purge ]; then
			pf_psql -Atqc "SELECT payflow.purge()" >>"$SOAK_DIR/purge.log" 2>&1 || true
			next_purge=$((SECONDS + purge_s))
		fi
		sleep 0.5
	done
}
