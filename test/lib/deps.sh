# shellcheck shell=bash
# test/lib/deps.sh — installs the Debian packages payflow's build, tests,
# demo and benchmarks need, once.  Sourced, not run.  Only Debian's own
# repositories are used; npm packages are installed by the scripts that use
# them, pinned by their lock files.

PF_DEBIAN_PACKAGES="build-essential pkg-config
	postgresql-15 postgresql-client-15 postgresql-server-dev-15 postgresql-contrib
	postgresql-15-cron postgresql-15-pgtap libtap-parser-sourcehandler-pgtap-perl
	libpq-dev libcurl4-openssl-dev libssl-dev libjansson-dev
	unixodbc unixodbc-dev odbc-postgresql libmicrohttpd-dev
	mariadb-server odbc-mariadb libsqliteodbc sqlite3
	nodejs npm curl ca-certificates procps psmisc wrk
	flex libkrb5-dev shellcheck postgresql-15-plpgsql-check pgbouncer pg-bsd-indent
	chromium"

pf_install_deps() {
	local missing=""
	local p
	for p in $PF_DEBIAN_PACKAGES; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
	done
	# Node may come from elsewhere on a developer machine; only the
	# binaries matter.
	if command -v node >/dev/null && command -v npm >/dev/null; then
		missing=$(echo "$missing" | tr ' ' '\n' | grep -vx -e nodejs -e npm | tr '\n' ' ')
	fi
	missing=$(echo $missing)
	if [ -n "$missing" ]; then
		echo "installing Debian packages: $missing"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq --no-install-recommends $missing >/dev/null
	fi
}
