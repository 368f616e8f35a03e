# shellcheck shell=bash
# test/lib/payload_checksum.sh — the keyed payload checksum, computed
# outside payflow (OpenSSL's command line) to check what payflow wrote.
# Sourced after cluster.sh.
#
# pf_payload_checksum FILE   "hmac-sha256:<hex>" of FILE under this
#                            database's key (payflow.payload_mac_key())
# pf_request_key FILE        requests/hmac-<hex>.json: where payflow-api
#                            puts a request body it sends to S3

pf_payload_mac_hex() {
	pf_psql -Atqc "SELECT encode(payflow.payload_mac_key(), 'hex')"
}
pf_payload_checksum() {
	local key
	key=$(pf_payload_mac_hex) || return 1
	echo "hmac-sha256:$(openssl dgst -sha256 -mac HMAC -macopt "hexkey:$key" -r "$1" | cut -d' ' -f1)"
}
pf_request_key() {
	local sum
	sum=$(pf_payload_checksum "$1") || return 1
	echo "requests/hmac-${sum#hmac-sha256:}.json"
}
