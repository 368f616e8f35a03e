CREATE FUNCTION payflow._mask_card_numbers(value text) RETURNS text
	LANGUAGE plpgsql IMMUTABLE STRICT
	AS $$
DECLARE
	v_match text;
	v_digits text;
	v_sum integer;
	v_digit integer;
	v_out text := value;
BEGIN
	IF value !~ '[0-9]{4}' THEN
		RETURN value;
	END IF;
	FOR v_match IN SELECT DISTINCT m[1] FROM regexp_matches(value, '(?<![0-9])([0-9](?:[ -]?[0-9]){12,18})(?![0-9])', 'g') m LOOP
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
	RETURN v_out;
END
$$;
