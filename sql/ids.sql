-- Operation ids: "pay_" + ULID, strictly increasing within a backend even
-- many per millisecond, and unique.
WITH ids AS (SELECT n, payflow._new_operation_id() AS id FROM generate_series(1, 20000) n)
SELECT count(*) = count(DISTINCT id) AS unique_ids,
       bool_and(id ~ '^pay_[0-9A-HJKMNP-TV-Z]{26}$') AS well_formed,
       bool_and(id > prev) AS strictly_increasing
  FROM (SELECT id, lag(id, 1, '') OVER (ORDER BY n) AS prev FROM ids) x;
-- the time part decodes to now (within a minute)
WITH id AS (SELECT substr(payflow._new_operation_id(), 5, 10) AS t),
     digits AS (SELECT i, strpos('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(t, i, 1)) - 1 AS v
                  FROM id, generate_series(1, 10) i)
SELECT abs(sum(v * (32::numeric ^ (10 - i))) / 1000 - extract(epoch FROM now())) < 60 AS time_part_is_now
  FROM digits;
-- API key secrets: strong random hex
SELECT length(payflow._random_token(32)) = 64 AS hex_64,
       payflow._random_token(16) <> payflow._random_token(16) AS differ;
SELECT * FROM pf_try($$SELECT payflow._random_token(4)$$);
