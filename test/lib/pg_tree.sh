# shellcheck shell=bash
# test/lib/pg_tree.sh — a PostgreSQL 15 installation like a managed
# server's, for the C-free flavour's tests.  Sourced, not run.
#
# A private copy of Debian's PostgreSQL 15 (binaries copied, everything
# else symlinked) without payflow's library or control file, so nothing
# of the C extension can be loaded or even found, and with pg_tle built
# from ../shared/vendor/ into it.  PostgreSQL finds its lib and share
# directories relative to its binary, so the copy works where it lies.
#
#   pf_pg_tree    builds it once under $PF_PG_TREE, prints its bin directory

PF_PG_TREE=${PF_PG_TREE:-/tmp/payflow-pgtree}
PF_PG_TLE_TARBALL=${PF_PG_TLE_TARBALL:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/../shared/vendor/pg_tle-1.5.3.tar.gz}

pf_pg_tree() {
	(
		flock 9
		pf_pg_tree_build
	) 9>"$PF_PG_TREE.lock"
	echo "$PF_PG_TREE/usr/lib/postgresql/15/bin"
}

pf_pg_tree_build() {
	local tree=$PF_PG_TREE stamp=$PF_PG_TREE/.built
	if [ ! -f "$stamp" ]; then
		rm -rf "$tree"
		mkdir -p "$tree/usr/lib/postgresql/15" "$tree/usr/share/postgresql" "$tree/build"
		# Binaries are copies: PostgreSQL resolves symlinks to find itself.
		cp -a /usr/lib/postgresql/15/bin "$tree/usr/lib/postgresql/15/bin"
		cp -as /usr/lib/postgresql/15/lib "$tree/usr/lib/postgresql/15/lib"
		cp -as /usr/share/postgresql/15 "$tree/usr/share/postgresql/15"
		rm -f "$tree/usr/lib/postgresql/15/lib/payflow.so" "$tree"/usr/share/postgresql/15/extension/payflow*
		rm -rf "$tree/usr/lib/postgresql/15/lib/bitcode/payflow"*

		# pg_tle, built in a scratch folder and installed into the copy only
		tar xzf "$PF_PG_TLE_TARBALL" -C "$tree/build"
		local src
		src=$(echo "$tree"/build/pg_tle-*)
		make -s -C "$src" with_llvm=no PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config >"$tree/build/make.log" 2>&1
		make -s -C "$src" with_llvm=no PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config \
			DESTDIR="$tree/stage" install >>"$tree/build/make.log" 2>&1
		cp "$tree"/stage/usr/lib/postgresql/15/lib/pg_tle.so "$tree/usr/lib/postgresql/15/lib/"
		cp "$tree"/stage/usr/share/postgresql/15/extension/pg_tle* "$tree/usr/share/postgresql/15/extension/"
		touch "$stamp"
	fi
}
