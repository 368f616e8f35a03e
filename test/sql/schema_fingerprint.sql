-- One line per object of the payflow extension and its privileges, sorted:
-- two databases whose fingerprints are equal have the same payflow schema.
-- Used to check that updating from an older version equals a fresh install.
SELECT line FROM (
	SELECT 'function ' || p.oid::regprocedure::text || ' acl=' || coalesce(p.proacl::text, '-')
		   || E'\n' || pg_get_functiondef(p.oid) AS line
	  FROM pg_proc p WHERE p.pronamespace = 'payflow'::regnamespace
	UNION ALL
	-- the comments \df+ shows (extension/sql/comments.sql)
	SELECT 'comment ' || p.oid::regprocedure::text || ' ' || d.description
	  FROM pg_proc p JOIN pg_description d ON d.objoid = p.oid AND d.classoid = 'pg_proc'::regclass
	 WHERE p.pronamespace = 'payflow'::regnamespace
	UNION ALL
	-- reloptions sorted: ALTER TABLE ... SET appends, CREATE TABLE keeps its order
	SELECT format('relation %s kind=%s acl=%s options=%s rls=%s', c.relname, c.relkind,
				  coalesce(c.relacl::text, '-'),
				  coalesce((SELECT array_agg(o ORDER BY o)::text FROM unnest(c.reloptions) o), '-'),
				  c.relrowsecurity)
	  FROM pg_class c WHERE c.relnamespace = 'payflow'::regnamespace
	UNION ALL
	-- position: the column's place among the table's live columns, which
	-- decides how much of a row an update on the same page logs (tables.sql)
	SELECT format('column %s.%s position=%s %s notnull=%s default=%s identity=%s collation=%s acl=%s',
				  c.relname, a.attname,
				  (SELECT count(*) FROM pg_attribute b WHERE b.attrelid = a.attrelid AND b.attnum > 0
						AND NOT b.attisdropped AND b.attnum <= a.attnum),
				  format_type(a.atttypid, a.atttypmod), a.attnotnull,
				  coalesce(pg_get_expr(d.adbin, d.adrelid), '-'), a.attidentity,
				  coalesce(co.collname, '-'), coalesce(a.attacl::text, '-'))
	  FROM pg_attribute a
	  JOIN pg_class c ON c.oid = a.attrelid
	  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
	  LEFT JOIN pg_collation co ON co.oid = a.attcollation AND a.attcollation <> 0
	 WHERE c.relnamespace = 'payflow'::regnamespace AND c.relkind IN ('r', 'v')
	   AND a.attnum > 0 AND NOT a.attisdropped
	UNION ALL
	SELECT 'index ' || pg_get_indexdef(i.indexrelid)
	  FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
	 WHERE c.relnamespace = 'payflow'::regnamespace
	UNION ALL
	SELECT format('constraint %s on %s: %s', con.conname, c.relname, pg_get_constraintdef(con.oid))
	  FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid
	 WHERE c.relnamespace = 'payflow'::regnamespace
	UNION ALL
	SELECT format('policy %s on %s: %s %s to %s using %s', pol.policyname, pol.tablename, pol.permissive,
				  pol.cmd, pol.roles, pol.qual)
	  FROM pg_policies pol WHERE pol.schemaname = 'payflow'
	UNION ALL
	SELECT format('trigger %s', pg_get_triggerdef(t.oid))
	  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
	 WHERE c.relnamespace = 'payflow'::regnamespace AND NOT t.tgisinternal
	UNION ALL
	SELECT format('extension member %s', pg_describe_object(d.classid, d.objid, d.objsubid))
	  FROM pg_depend d
	 WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
	   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'payflow')
	UNION ALL
	SELECT format('step %s', to_jsonb(s)) FROM payflow.step_definitions s
	UNION ALL
	SELECT format('pipeline %s', to_jsonb(p) - 'created_at' - 'created_by') FROM payflow.pipelines p
	UNION ALL
	SELECT format('destination %s', to_jsonb(d) - 'created_at') FROM payflow.destinations d
) fingerprint
-- a day's partitions (extension/sql/partitions.sql) are data, made and
-- dropped by purge and by the update, not part of the schema
WHERE line !~ '_d[0-9]{8}([^0-9]|$)'
ORDER BY line;
