$_pgtle_$,
	'{pgcrypto}');
\elif :payflow_version_new
SELECT pgtle.install_extension_version_sql('payflow', '@VERSION@',
$_pgtle_$
