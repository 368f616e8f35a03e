CREATE OR REPLACE FUNCTION payflow._mask_card_numbers(value text) RETURNS text
	LANGUAGE plpgsql IMMUTABLE STRICT
	AS $$
DECLARE
	-- A UUID's digit groups are no card number: "17678424-4288-4eea-..."
	-- holds the Luhn-valid run 1767842442884, and masking it would change
	-- event ids and operation bodies kept in dead letters for replay.
	-- UUIDs are set aside behind placeholders of non-digits while runs are
	-- looked for, then put back.
	c_uuid constant text := '[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}';
	v_uuids text[];
	v_match text;
	v_digits text;
	v_sum integer;
	v_digit integer;
	v_out text := value;
BEGIN
	IF value !~ '[0-9]{4}' THEN
		RETURN value;
	END IF;
	-- (a text already holding the placeholder mark is searched whole:
	-- masking too much is the safe side)
	IF strpos(value, chr(57344)) = 0 THEN
		v_uuids := ARRAY(SELECT DISTINCT m[1] FROM regexp_matches(value, '(' || c_uuid || ')', 'g') m);
		FOR i IN 1..coalesce(array_length(v_uuids, 1), 0) LOOP
			v_out := replace(v_out, v_uuids[i], chr(57344) || translate(i::text, '0123456789', 'abcdefghij') || chr(57345));
		END LOOP;
	END IF;
	FOR v_match IN SELECT DISTINCT m[1] FROM regexp_matches(v_out, '(?<![0-9])([0-9](?:[ -]?[0-9]){12,18})(?![0-9])', 'g') m LOOP
		v_digits := regexp_replace(v_match, '[^0-9]', '', 'g');
		v_sum := 0;
		FOR i IN 1..length(v_digits) LOOP
			v_digit := substr(v_digits, length(v_digits) - i + 1, 1)::integer;
			IF i % 2 = 0 THEN
				v_digit := v_digit * 2;
				IF v_digit > 9 THEN
					v_digit := v_digit - 9;
				END IF;
			END IF;
			v_sum := v_sum + v_digit;
		END LOOP;
		IF v_sum % 10 = 0 THEN
			v_out := replace(v_out, v_match, repeat('*', length(v_digits) - 4) || right(v_digits, 4));
		END IF;
	END LOOP;
	FOR i IN 1..coalesce(array_length(v_uuids, 1), 0) LOOP
		v_out := replace(v_out, chr(57344) || translate(i::text, '0123456789', 'abcdefghij') || chr(57345), v_uuids[i]);
	END LOOP;
	RETURN v_out;
END
$$;
