SELECT pgtle.set_default_version('payflow', '@VERSION@');
COMMIT;
