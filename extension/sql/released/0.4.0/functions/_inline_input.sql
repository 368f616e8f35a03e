CREATE OR REPLACE FUNCTION payflow._inline_input(p_ref jsonb) RETURNS bytea
	LANGUAGE plpgsql STABLE
	AS $$
BEGIN
	-- PL/pgSQL, whose plan is kept: as a SQL function reading a table (never
	-- inlined) each call started an executor of its own (20 us, a claim each)
	RETURN (SELECT payflow._verified_content(p_ref, p.content)
			  FROM payflow.payloads p
			 WHERE p_ref ->> 'store' = 'pg' AND p.key = p_ref ->> 'key');
END
$$;
