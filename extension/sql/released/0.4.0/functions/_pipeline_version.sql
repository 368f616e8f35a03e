CREATE OR REPLACE FUNCTION payflow._pipeline_version() RETURNS integer
	LANGUAGE plpgsql STABLE
	AS $$
BEGIN
	RETURN (SELECT max(p.version) FROM payflow.pipelines p);
END
$$;
