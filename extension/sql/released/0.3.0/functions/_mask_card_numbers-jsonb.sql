CREATE FUNCTION payflow._mask_card_numbers(value jsonb) RETURNS jsonb
	LANGUAGE sql IMMUTABLE STRICT
	AS $$
	SELECT CASE jsonb_typeof(value)
		WHEN 'string' THEN to_jsonb(payflow._mask_card_numbers(value #>> '{}'))
		WHEN 'object' THEN (SELECT coalesce(jsonb_object_agg(k, payflow._mask_card_numbers(v)), '{}'::jsonb)
							  FROM jsonb_each(value) AS e(k, v))
		WHEN 'array' THEN (SELECT coalesce(jsonb_agg(payflow._mask_card_numbers(v) ORDER BY i), '[]'::jsonb)
							 FROM jsonb_array_elements(value) WITH ORDINALITY AS e(v, i))
		-- a number that is a card number becomes the masked string
		WHEN 'number' THEN CASE WHEN payflow._mask_card_numbers(value::text) = value::text THEN value
								ELSE to_jsonb(payflow._mask_card_numbers(value::text)) END
		ELSE value
	END
$$;
