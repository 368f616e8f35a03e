-- payflow, C flavour: what a scheduler pass does last.  Put where
-- payflow.sql and the update scripts say "--@@ flavour include
-- wake_listeners.sql @@" (extension/sql/assemble.sh).
--
-- After a scheduler pass: nothing to do here.  The scheduler background
-- worker sends the NOTIFYs for the commits that flagged a wake-up in shared
-- memory (wakeup.c); the C-free flavour has no shared memory and notifies
-- from this function instead.
CREATE OR REPLACE FUNCTION payflow._wake_listeners() RETURNS void
	LANGUAGE sql VOLATILE
	AS $$ SELECT $$;
