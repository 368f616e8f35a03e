#!/bin/bash
# The image of deploy/docker/Dockerfile, built and run without Docker:
#   - two base root file systems made with mmdebstrap from Debian 12's
#     packages (build: the compilers and -dev packages; runtime: the shared
#     libraries, CA certificates, curl, psql), imported into buildah;
#   - the Dockerfile built with buildah (--storage-driver vfs --isolation
#     chroot, --platform linux/amd64) on those bases, with a test CA as the
#     database server's CA bundle;
#   - then each program started inside the image the way ECS starts it: the
#     root file system read-only, as the image's user (uid 10001, not root),
#     with exactly its rendered task definition's environment (the secrets
#     as dummies, every address on loopback port 9), a scratch /tmp only
#     where the task definition mounts one; still running after 3 s (its
#     settings accepted), then SIGTERM, and it must exit 0;
#   - sslmode=verify-full with the image's CA bundle against a TLS-only
#     PostgreSQL whose certificate the test CA issued: psql and the relay
#     connect; a wrong host name or a bundle without the CA is refused.
#
# The bases are cached (PAYFLOW_CACHE_DIR, else .cache/deploy-image), keyed
# by their package lists; the image itself is built on every run. About
# 2 minutes with the bases cached, 4 without (2 cores).
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
source test/lib/assert.sh
source test/lib/free_port.sh

if [ "$(id -u)" != 0 ]; then
	pf_skip "the image" "mmdebstrap and buildah's chroot isolation need root here"
	pf_done
	exit 0
fi
for p in mmdebstrap buildah; do
	command -v "$p" >/dev/null || {
		echo "# installing $p"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap buildah >/dev/null 2>&1 ||
			{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap buildah >/dev/null; }
	}
done

cache=${PAYFLOW_CACHE_DIR:-$REPO/.cache}/deploy-image
work=$(mktemp -d /tmp/payflow-image.XXXXXX)
B=(buildah --storage-driver vfs --root "$work/storage" --runroot "$work/run")
declare -a containers=()
cleanup() {
	for c in "${containers[@]}"; do "${B[@]}" umount "$c" >/dev/null 2>&1 || true; "${B[@]}" rm "$c" >/dev/null 2>&1 || true; done
	"${B[@]}" rmi --all --force >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
started_all=$SECONDS

# ---- the bases, from Debian packages (the Dockerfile's package lists, read from it)
packages_of() { sed -n "s/^ARG $1=\"\(.*\)\"$/\1/p" deploy/docker/Dockerfile; }
build_packages=$(packages_of BUILD_PACKAGES)
runtime_packages=$(packages_of RUNTIME_PACKAGES)
pf_ok "the Dockerfile names its build and runtime packages" test -n "$build_packages" -a -n "$runtime_packages"
base() {	# base NAME VARIANT PACKAGES: a cached mmdebstrap tarball, printed path
	local name=$1 variant=$2 pkgs=$3 key tar
	key=$(printf '%s %s bookworm amd64' "$variant" "$pkgs" | sha256sum | cut -c1-16)
	tar=$cache/$name-$key.tar
	if [ ! -s "$tar" ]; then
		mkdir -p "$cache"
		rm -f "$cache/$name"-*.tar
		mmdebstrap --quiet --variant="$variant" --architectures=amd64 --include="${pkgs// /,}" bookworm "$tar.tmp" >&2
		mv "$tar.tmp" "$tar"
	fi
	echo "$tar"
}
t=$SECONDS
build_tar=$(base build apt "$build_packages ca-certificates")
runtime_tar=$(base runtime minbase "$runtime_packages")
echo "# bases (mmdebstrap, or the cache): $((SECONDS - t)) s"
for n in build runtime; do
	tar=$([ $n = build ] && echo "$build_tar" || echo "$runtime_tar")
	c=$("${B[@]}" from --platform linux/amd64 scratch)
	"${B[@]}" add --quiet "$c" "$tar" / >/dev/null
	"${B[@]}" commit --quiet "$c" "localhost/payflow-base-$n:test" >/dev/null
	"${B[@]}" rm "$c" >/dev/null
done
pf_ok "the bases are imported into buildah" bash -c "${B[*]} inspect --type image localhost/payflow-base-runtime:test >/dev/null"

# ---- the build context: what Dockerfile.dockerignore lets through, and a test CA
ctx=$work/context
mkdir -p "$ctx/workers" "$ctx/deploy/docker/certs"
cp -r workers/Makefile workers/include workers/src "$ctx/workers/"
workers/console/vendor.sh
mkdir -p "$ctx/workers/console"
cp -r workers/console/index.html workers/console/console.js workers/console/console.css \
	workers/console/openapi.json workers/console/vendor "$ctx/workers/console/"
cp deploy/docker/Dockerfile deploy/docker/Dockerfile.dockerignore "$ctx/deploy/docker/"
cp deploy/docker/certs/README.md "$ctx/deploy/docker/certs/"
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=payflow-image-test-ca \
	-keyout "$work/ca.key" -out "$ctx/deploy/docker/certs/db-ca.pem" 2>/dev/null
cp "$ctx/deploy/docker/certs/db-ca.pem" "$work/ca.pem"
t=$SECONDS
build() { "${B[@]}" build --isolation chroot --platform linux/amd64 -f deploy/docker/Dockerfile \
	--build-arg BUILD_BASE=localhost/payflow-base-build:test --build-arg RUNTIME_BASE=localhost/payflow-base-runtime:test "$@"; }
if build -t localhost/payflow:test "$ctx" >"$work/build.log" 2>&1; then
	echo "ok - buildah built deploy/docker/Dockerfile for linux/amd64 ($((SECONDS - t)) s)"
else
	tail -n 30 "$work/build.log" | sed 's/^/    /'
	echo "not ok - buildah built deploy/docker/Dockerfile"
	pf_done
	exit 1
fi
pf_ok "the build compiled the programs with warnings as errors" grep -q -- '-Werror' "$work/build.log"
# without the CA bundle the build stops, naming the file
rm "$ctx/deploy/docker/certs/db-ca.pem"
if build -t localhost/payflow:no-ca "$ctx" >"$work/build-no-ca.log" 2>&1; then
	pf_ok "a build without deploy/docker/certs/db-ca.pem is refused" false
else
	pf_ok "a build without deploy/docker/certs/db-ca.pem is refused, naming it" grep -q 'db-ca.pem is missing' "$work/build-no-ca.log"
fi

cfg=$("${B[@]}" inspect --type image --format '{{.OCIv1.Config.User}}|{{.OCIv1.Architecture}}|{{.OCIv1.OS}}' localhost/payflow:test)
pf_eq "the image runs as uid 10001 on linux/amd64" "10001:10001|amd64|linux" "$cfg"
pf_ok "the image sets PGSSLROOTCERT to its CA bundle" bash -c \
	"${B[*]} inspect --type image --format '{{.OCIv1.Config.Env}}' localhost/payflow:test | grep -q PGSSLROOTCERT=/usr/local/share/payflow/certs/db-ca.pem"
c=$("${B[@]}" from --quiet localhost/payflow:test)
containers+=("$c")
root=$("${B[@]}" mount "$c")
pf_ok "the three programs are in /usr/local/bin" test -x "$root/usr/local/bin/payflow-relay" -a -x "$root/usr/local/bin/payflow-worker" \
	-a -x "$root/usr/local/bin/payflow-api"
pf_ok "the CA bundle is the one built in" bash -c \
	"openssl x509 -in '$root/usr/local/share/payflow/certs/db-ca.pem' -noout -subject | grep -q payflow-image-test-ca"
pf_ok "no compiler in the runtime image" test ! -e "$root/usr/bin/gcc"
echo "# image size: $(du -sm "$root" | cut -f1) MiB unpacked"

# in_image [--tmp] VAR=value... -- COMMAND...: run inside the image as ECS would: its own
# mount namespace, the root read-only, /proc, /dev, a tmpfs /tmp only with --tmp,
# uid/gid 10001, exactly the given environment; the host's network (loopback only is used)
in_image() {
	local tmp=0
	[ "$1" = --tmp ] && { tmp=1; shift; }
	local -a vars=()
	while [ "$1" != -- ]; do vars+=("$1"); shift; done
	shift
	exec unshare --mount --propagation private --fork -- bash -c '
		set -e
		root=$1 tmp=$2
		shift 2
		mount --bind "$root" "$root"
		mount -o remount,bind,ro "$root"
		mount -t proc proc "$root/proc"
		mount --rbind /dev "$root/dev"
		[ "$tmp" = 1 ] && mount -t tmpfs -o size=64m,mode=1777 tmpfs "$root/tmp"
		exec chroot --userspec=10001:10001 --groups=10001 "$root" "$@"' in_image "$root" "$tmp" \
		/usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin "${vars[@]}" "$@"
}
out=$(in_image -- sh -c 'id -u; touch /probe 2>&1 || true; touch /tmp/probe 2>&1 || true') || true
pf_ok "inside: not root" test "$(echo "$out" | head -n 1)" = 10001
pf_ok "inside: the root file system is read-only" grep -q 'Read-only file system' <<<"$(echo "$out" | sed -n 2p)"
pf_ok "inside: /tmp too, without the task definition's volume" grep -q 'Read-only file system' <<<"$(echo "$out" | sed -n 3p)"
pf_ok "inside: the programs find every shared library" bash -c "! chroot '$root' ldd /usr/local/bin/payflow-relay /usr/local/bin/payflow-worker /usr/local/bin/payflow-api | grep -q 'not found'"
pf_ok "inside: psql for the metrics publisher" test -x "$root/usr/bin/psql"

# ---- each task definition's program, with its rendered settings
dead=http://127.0.0.1:9
export AccountId=123456789012 Region=eu-west-1 Environment=prod ImageTag=test
export PayflowQueueUrls="payment-requests=$dead/1/a,payment-completed=$dead/1/b,invoice-requests=$dead/1/c,operation-events=$dead/1/d"
for o in PaymentRequests PaymentCompleted InvoiceRequests OperationEvents; do export ${o}QueueUrl="$dead/1/$o"; done
export PayloadBucketName=payflow-prod-payloads InvoiceUrl=https://127.0.0.1:9/v1/invoices
export LegacySubmit='{CALL pay.submit(:idempotency_key)}' LegacyStatus='{CALL pay.status(:legacy_ref)}' LegacyLookup=
for s in DatabaseUrlRelay DatabaseUrlPayment DatabaseUrlPostprocess DatabaseUrlInvoice DatabaseUrlWebhook DatabaseUrlApi \
	DatabaseUrlMonitor DatabaseUrlS3Sweep LegacyOdbc InvoiceAuthorization PostprocessAuthorization; do
	export ${s}SecretArn="arn:aws:secretsmanager:eu-west-1:123456789012:secret:payflow/prod/$s-AbCdEf"
done
api_port=$(pf_free_port)
for f in deploy/ecs/*.json; do
	name=$(basename "$f" .json)
	# what ECS puts in the container: environment, secrets (dummies), container credentials
	deploy/ecs/render.sh "$f" | node -e '
		const td = JSON.parse(require("fs").readFileSync(0, "utf8"));
		const c = td.containerDefinitions[0];
		const dummy = { PAYFLOW_DATABASE_URL: "postgresql://edge:not-a-password@127.0.0.1:9/payflow?connect_timeout=1",
			METRICS_DATABASE_URL: "postgresql://monitor:not-a-password@127.0.0.1:9/payflow?connect_timeout=1",
			PAYFLOW_LEGACY_ODBC: "Driver=none;Server=127.0.0.1;Port=9;PWD=not-a-password" };
		const env = { AWS_CONTAINER_CREDENTIALS_FULL_URI: "http://127.0.0.1:9/credentials", AWS_ENDPOINT_URL: "http://127.0.0.1:9" };
		for (const e of c.environment) env[e.name] = e.value;
		for (const s of c.secrets) env[s.name] = dummy[s.name] || "Bearer not-a-password";
		if (env.PAYFLOW_LISTEN) env.PAYFLOW_LISTEN = "127.0.0.1:" + process.argv[1];	// 8080 may be taken here
		for (const [k, v] of Object.entries(env)) console.log(`${k}=${v}`);
		console.log(`TMP=${(td.volumes || []).length ? 1 : 0}`);
		console.log(`COMMAND=${JSON.stringify([...(c.entryPoint || []), ...c.command])}`);' "$api_port" >"$work/$name.env"
	mapfile -t vars < <(grep -v '^COMMAND=\|^TMP=' "$work/$name.env")
	mapfile -t cmd < <(sed -n 's/^COMMAND=//p' "$work/$name.env" | node -e 'for (const a of JSON.parse(require("fs").readFileSync(0, "utf8"))) console.log(a)')
	tmpflag=()
	[ "$(sed -n 's/^TMP=//p' "$work/$name.env")" = 1 ] && tmpflag=(--tmp)
	in_image "${tmpflag[@]}" "${vars[@]}" -- "${cmd[@]}" >"$work/$name.log" 2>&1 &
	outer=$!
	sleep 3
	prog=$(pgrep -P "$outer" | head -n 1 || true)
	if [ -z "$prog" ] || ! kill -0 "$prog" 2>/dev/null; then
		wait "$outer" && rc=0 || rc=$?
		head -n 5 "$work/$name.log" | sed 's/^/    /'
		echo "not ok - $name: runs in the image with its task definition's settings (exited $rc)"
		PF_FAILURES=$((PF_FAILURES + 1))
		continue
	fi
	uid=$(awk '/^Uid:/ {print $2}' "/proc/$prog/status")
	pf_eq "$name: runs in the image, read-only, as uid 10001, with its task definition's settings" 10001 "$uid"
	if [ "$name" = payflow-api ]; then
		pf_eq "payflow-api: /healthz answers from inside the image" 200 \
			"$(curl -s -o /dev/null -w '%{http_code}' -m 2 "http://127.0.0.1:$api_port/healthz" || true)"
		# the console's files are in the image, found where payflow-api looks
		pf_eq "payflow-api: the console and its chart library are served from the image" "200 200 200" \
			"$(for u in /console/ /console/vendor/uPlot.iife.min.js /openapi.json; do
				curl -s -o /dev/null -w '%{http_code} ' -m 2 "http://127.0.0.1:$api_port$u" || true
			done | sed 's/ $//')"
	fi
	kill -TERM "$prog"
	t=$SECONDS
	wait "$outer" && rc=0 || rc=$?
	pf_eq "$name: exits 0 on SIGTERM ($((SECONDS - t)) s)" 0 "$rc"
done
pf_ok "no dummy password in any program's log" bash -c "! grep -l 'not-a-password' $work/*.log"

# ---- sslmode=verify-full with the image's CA bundle, against a PostgreSQL that
# serves TLS only, with a certificate for "localhost" issued by the test CA
# (as RDS's is by its bundle's CAs); the relay's own settings from its task
# definition (PGSSLMODE, PGSSLROOTCERT), only its database URL changed.
tls_port=54366
# its own folder: $work is private to root, and the cluster belongs to postgres
export PF_PGPORT=$tls_port PF_FLAVOUR=c PF_CLUSTER_DIR=/tmp/payflow-image-tls-$tls_port
source test/lib/cluster.sh
tls_cleanup() { pf_cluster_destroy >/dev/null 2>&1 || true; cleanup; }
trap tls_cleanup EXIT
mkdir -p "$PF_CLUSTER_DIR/tls"
openssl req -new -newkey rsa:2048 -nodes -subj /CN=localhost -keyout "$PF_CLUSTER_DIR/tls/server.key" \
	-out "$work/server.csr" 2>/dev/null
openssl x509 -req -in "$work/server.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial -days 1 \
	-extfile <(printf 'subjectAltName=DNS:localhost\n') -out "$PF_CLUSTER_DIR/tls/server.crt" 2>/dev/null
chmod 600 "$PF_CLUSTER_DIR/tls/server.key"
chown -R postgres:postgres "$PF_CLUSTER_DIR"
PF_CLUSTER_EXTRA_CONF="ssl = on
ssl_cert_file = '$PF_CLUSTER_DIR/tls/server.crt'
ssl_key_file = '$PF_CLUSTER_DIR/tls/server.key'" pf_cluster_start
# TCP without TLS is refused, as on a server with rds.force_ssl
sed -i '1i hostnossl all all all reject' "$PF_CLUSTER_DIR/data/pg_hba.conf"
pf_psql -qAtc "SELECT pg_reload_conf()" >/dev/null
tls_url="postgresql://postgres@localhost:$tls_port/payflow?hostaddr=127.0.0.1&connect_timeout=3"
ca=/usr/local/share/payflow/certs/db-ca.pem
tls_psql() { in_image "$@" -- psql -X -Atc 'SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()' 2>&1; }
pf_eq "verify-full: psql in the image connects with the image's CA bundle, over TLS" t \
	"$(tls_psql PGSSLMODE=verify-full PGSSLROOTCERT=$ca PGDATABASE=payflow PGUSER=postgres PGHOST=localhost \
		PGHOSTADDR=127.0.0.1 PGPORT=$tls_port)"
pf_ok "verify-full: a host name the certificate does not name is refused" grep -q 'does not match host name' \
	<<<"$(tls_psql PGSSLMODE=verify-full PGSSLROOTCERT=$ca PGDATABASE=payflow PGUSER=postgres PGHOST=127.0.0.1 PGPORT=$tls_port)"
pf_ok "verify-full: a CA bundle without the server's CA is refused" grep -q 'certificate verify failed' \
	<<<"$(tls_psql PGSSLMODE=verify-full PGSSLROOTCERT=/etc/ssl/certs/ca-certificates.crt PGDATABASE=payflow \
		PGUSER=postgres PGHOST=localhost PGHOSTADDR=127.0.0.1 PGPORT=$tls_port)"
pf_ok "verify-full: without TLS the server refuses the connection" grep -q 'no encryption' \
	<<<"$(tls_psql PGSSLMODE=disable PGDATABASE=payflow PGUSER=postgres PGHOST=localhost PGHOSTADDR=127.0.0.1 PGPORT=$tls_port)"
mapfile -t vars < <(grep -v '^COMMAND=\|^TMP=\|^PAYFLOW_DATABASE_URL=' "$work/payflow-relay.env")
pf_ok "the relay's task definition asks for verify-full with the image's bundle" bash -c \
	"grep -qx 'PGSSLMODE=verify-full' '$work/payflow-relay.env' && grep -qx 'PGSSLROOTCERT=$ca' '$work/payflow-relay.env'"
mapfile -t cmd < <(sed -n 's/^COMMAND=//p' "$work/payflow-relay.env" | node -e 'for (const a of JSON.parse(require("fs").readFileSync(0, "utf8"))) console.log(a)')
in_image "${vars[@]}" PAYFLOW_DATABASE_URL="$tls_url" -- "${cmd[@]}" >"$work/relay-tls.log" 2>&1 &
outer=$!
relay_on_tls() {
	[ "$(pf_psql -qAtc "SELECT bool_and(s.ssl) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
						 WHERE a.application_name = 'payflow-relay' HAVING count(*) > 0")" = t ]
}
waited=0
until relay_on_tls || [ $waited -ge 20 ]; do sleep 0.5; waited=$((waited + 1)); done
pf_ok "verify-full: the relay in the image connects to the TLS-only server with its task definition's settings" relay_on_tls
prog=$(pgrep -P "$outer" | head -n 1 || true)
[ -n "$prog" ] && kill -TERM "$prog"
wait "$outer" && rc=0 || rc=$?
pf_eq "verify-full: the relay exits 0 on SIGTERM" 0 "$rc"
[ "$rc" = 0 ] || head -n 20 "$work/relay-tls.log" | sed 's/^/    /'
pf_cluster_destroy
echo "# deploy_image: $((SECONDS - started_all)) s in all"
pf_done
