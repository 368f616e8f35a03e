-- backoff_delay: min(base * 2^attempt, cap) plus up to jitter * delay.
SELECT a, payflow.backoff_delay(a, '1 second', '1 minute', 0) AS delay
  FROM generate_series(0, 8) a;
SELECT payflow.backoff_delay(3, '250 milliseconds', '1 hour', 0) AS ms_base;
SELECT payflow.backoff_delay(1000, '1 second', '15 minutes', 0) AS huge_attempt_saturates;
SELECT payflow.backoff_delay(5, '0', '1 minute', 0.5) AS zero_base;
SELECT payflow.backoff_delay(2, '1 day', '2 days', 0) AS days;

-- jitter stays within [delay, delay * (1 + jitter)] and actually varies
SELECT min(d) >= '4 seconds' AS lower_bound, max(d) <= '5 seconds' AS upper_bound,
       count(DISTINCT d) > 50 AS varies
  FROM (SELECT payflow.backoff_delay(2, '1 second', '1 hour', 0.25) AS d
          FROM generate_series(1, 500)) x;
-- the default jitter is 0.2
SELECT max(d) <= '1.2 seconds' AND min(d) >= '1 second' AS default_jitter
  FROM (SELECT payflow.backoff_delay(0, '1 second', '1 hour') AS d FROM generate_series(1, 200)) x;

SELECT * FROM pf_try($$SELECT payflow.backoff_delay(-1, '1 second', '1 minute')$$);
SELECT * FROM pf_try($$SELECT payflow.backoff_delay(1, '-1 second', '1 minute')$$);
SELECT * FROM pf_try($$SELECT payflow.backoff_delay(1, '1 second', '1 minute', 1.5)$$);
SELECT payflow.backoff_delay(NULL, '1 second', '1 minute') IS NULL AS strict;
