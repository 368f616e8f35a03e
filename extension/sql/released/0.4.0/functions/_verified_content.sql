CREATE OR REPLACE FUNCTION payflow._verified_content(p_ref jsonb, p_content bytea) RETURNS bytea
	LANGUAGE sql IMMUTABLE
	AS $$ SELECT CASE WHEN payflow._checksum(p_content) = p_ref ->> 'checksum' THEN p_content END $$;
