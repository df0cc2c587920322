#!/bin/bash
# moat image pull against loopback registries (tests/integration/registry.sh):
# plain HTTP, TLS with a test CA, htpasswd Basic, Bearer tokens; by tag and
# by digest; gzip, zstd and uncompressed layers; a multi-arch index; and a
# fault proxy: 429 then 200, a cut blob resumed (and one always cut: a clean
# failure), a corrupted blob refused with nothing kept, a redirect followed
# without the Authorization header, a pull killed with SIGKILL then done
# again, two pulls at once downloading each blob once.
# MOAT_BIN: the moat binary (default build/moat).
SUITE=image-pull
MOAT=${MOAT_BIN:-build/moat}
fails=0
. "$(dirname "$0")/checks.sh"
. "$(dirname "$0")/registry.sh"
[ -x "$MOAT" ] || { echo "FAIL: $SUITE: no $MOAT (make build/moat)"; exit 1; }
reg_need
reg_init || { echo "FAIL: $SUITE: cannot make the test CA"; exit 1; }
# No credentials of the user's: an empty HOME, no REGISTRY_AUTH_FILE.
export HOME=$REG_TMP/home MOAT_HOME=$REG_TMP/moat
unset REGISTRY_AUTH_FILE DOCKER_CONFIG
mkdir -p "$HOME"

pull() {   # pull ARGS...: moat image pull, output in $REG_TMP/out
    "$MOAT" image pull "$@" >"$REG_TMP/out" 2>&1
}
blobs() { ls "$MOAT_HOME/images/blobs/sha256" 2>/dev/null | wc -l; }
has_blob() { [ -f "$MOAT_HOME/images/blobs/sha256/${1#sha256:}" ]; }
fresh() { rm -rf "$MOAT_HOME"; }
remote_digest() {   # remote_digest REF [skopeo options]: the registry's manifest digest
    local r=$1; shift
    skopeo inspect --raw --tls-verify=false "$@" "docker://$r" | sha256sum | sed 's/^/sha256:/; s/ .*//'
}
manifest_blobs() {   # the config and layer digests of the manifest digest $1 in the store
    python3 -c 'import json,sys; m=json.load(open(sys.argv[1]))
print("\n".join([m["config"]["digest"]] + [l["digest"] for l in m["layers"]]))' \
        "$MOAT_HOME/images/blobs/sha256/${1#sha256:}"
}
all_present() {   # every blob of manifest $1 in the store
    local d
    has_blob "$1" || return 1
    for d in $(manifest_blobs "$1"); do has_blob "$d" || return 1; done
}
fails_with() {   # fails_with MESSAGE ARGS...: moat image pull ARGS fails saying MESSAGE
    local msg=$1; shift
    ! "$MOAT" image pull "$@" >"$REG_TMP/out" 2>&1 && out_has "$msg"
}
out_has() { grep -q -- "$1" "$REG_TMP/out" || { sed 's/^/    /' "$REG_TMP/out"; return 1; }; }

reg_layout "$REG_TMP/oci" || { echo "FAIL: $SUITE: cannot make the test images"; exit 1; }

# ---- plain HTTP ----
reg_start plain || { echo "FAIL: $SUITE: docker-registry did not start"; exit 1; }
PLAIN=$REG_ADDR
reg_push "oci:$REG_TMP/oci:v1" "$PLAIN/ns/app:v1" &&
reg_push "oci:$REG_TMP/oci:multi" "$PLAIN/ns/multi:latest" --all &&
ZSTD=$(reg_push_dir "oci:$REG_TMP/oci:v1" "$PLAIN" ns/app:zstd zstd) &&
NONE=$(reg_push_dir "oci:$REG_TMP/oci:v1" "$PLAIN" ns/app:none none) ||
    { echo "FAIL: $SUITE: cannot push the test images"; exit 1; }
V1=$(remote_digest "$PLAIN/ns/app:v1")

check "plain HTTP: pull by tag" pull --insecure "$PLAIN/ns/app:v1"
check "  prints the manifest digest the registry has" out_has "$V1"
check "  manifest, config and both layers in the store" all_present "$V1"
V1_BLOBS=$(manifest_blobs "$V1" 2>/dev/null)
LAYER=$(python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); print(max(m["layers"], key=lambda l: l["size"])["digest"])' \
    "$MOAT_HOME/images/blobs/sha256/${V1#sha256:}" 2>/dev/null)
check "  again: every blob already present" pull --insecure "$PLAIN/ns/app:v1"
check "  nothing downloaded the second time" out_has "already present"
check "--quiet prints only the digest" \
    bash -c '[ "$("$0" image pull --quiet --insecure "$1")" = "$2" ]' "$MOAT" "$PLAIN/ns/app:v1" "$V1"
fresh
check "pull by digest" pull --insecure "$PLAIN/ns/app@$V1"
check "  all blobs of it present" all_present "$V1"
check "a digest the registry does not have: an error" \
    fails_with "manifest unknown" --insecure "$PLAIN/ns/app@sha256:$(printf x | sha256sum | cut -c1-64)"
check "an unknown tag: manifest unknown" \
    fails_with "manifest unknown" --insecure "$PLAIN/ns/app:nope"
check "zstd layers" pull --insecure "$PLAIN/ns/app:zstd"
check "  its layers are zstd" grep -q 'tar+zstd' "$MOAT_HOME/images/blobs/sha256/${ZSTD#sha256:}"
check "  all present" all_present "$ZSTD"
check "uncompressed layers" pull --insecure "$PLAIN/ns/app:none"
check "  all present" all_present "$NONE"
check "without --insecure a plain HTTP registry is refused" fails_with "plain-HTTP registry: --insecure" "$PLAIN/ns/app:v1"

# ---- the multi-arch index ----
fresh
check "index: linux/amd64 picked by default" pull --quiet --insecure "$PLAIN/ns/multi:latest"
check "  the amd64 manifest" out_has "$LAYOUT_AMD64"
check "  its blobs present" all_present "$LAYOUT_AMD64"
check "index: --platform linux/arm64 picks the other" pull --quiet --insecure --platform linux/arm64 "$PLAIN/ns/multi:latest"
check "  the arm64 manifest" out_has "$LAYOUT_ARM64"
check "  its blobs present" all_present "$LAYOUT_ARM64"
check "index: a platform it does not have is an error" \
    bash -c '! "$0" image pull --insecure --platform linux/s390x "$1" >/dev/null 2>&1' "$MOAT" "$PLAIN/ns/multi:latest"

# ---- TLS ----
reg_start tls && reg_push "oci:$REG_TMP/oci:v1" "$REG_ADDR/ns/app:v1" ||
    { echo "FAIL: $SUITE: TLS registry"; exit 1; }
TLS=$REG_ADDR
fresh
check "TLS: an unknown CA is refused" fails_with "TLS" "$TLS/ns/app:v1"
check "TLS: --ca-cert" pull --ca-cert "$REG_CA" "$TLS/ns/app:v1"
check "  all present" all_present "$V1"

# ---- Basic ----
reg_start basic && reg_push "oci:$REG_TMP/oci:v1" "$REG_ADDR/ns/app:v1" --dest-creds "$REG_USER:$REG_PASS" ||
    { echo "FAIL: $SUITE: Basic registry"; exit 1; }
BASIC=$REG_ADDR
fresh
check "Basic: no credentials: a clear error" \
    fails_with "requires a user name and password" --insecure "$BASIC/ns/app:v1"
check "Basic: a wrong password: a clear error" \
    fails_with "refused the credentials" --insecure --creds "$REG_USER:wrong" "$BASIC/ns/app:v1"
check "Basic: --creds" pull --insecure --creds "$REG_USER:$REG_PASS" "$BASIC/ns/app:v1"
check "  all present" all_present "$V1"
fresh
mkdir -p "$HOME/.docker"
printf '{"auths":{"%s":{"auth":"%s"}}}\n' "$BASIC" "$(printf '%s:%s' "$REG_USER" "$REG_PASS" | base64 -w0)" \
    > "$HOME/.docker/config.json"
check "Basic: ~/.docker/config.json (auth)" pull --insecure "$BASIC/ns/app:v1"
rm -f "$HOME/.docker/config.json"
fresh
printf '{"auths":{"http://%s/v1/":{"username":"%s","password":"%s"}}}\n' "$BASIC" "$REG_USER" "$REG_PASS" \
    > "$REG_TMP/auth.json"
check "Basic: \$REGISTRY_AUTH_FILE (username, password)" env REGISTRY_AUTH_FILE="$REG_TMP/auth.json" \
    bash -c '"$0" image pull --insecure "$1" >/dev/null 2>&1' "$MOAT" "$BASIC/ns/app:v1"
check "  all present" all_present "$V1"

# ---- Bearer ----
reg_start token && reg_push "oci:$REG_TMP/oci:v1" "$REG_ADDR/ns/app:v1" --dest-creds "$REG_USER:$REG_PASS" ||
    { echo "FAIL: $SUITE: token registry"; exit 1; }
TOKEN=$REG_ADDR
fresh
: > "$TOKEN_LOG"
check "Bearer: anonymous token" pull --insecure "$TOKEN/ns/app:v1"
check "  all present" all_present "$V1"
check "  one token for the whole pull" [ "$(grep -c . "$TOKEN_LOG")" = 1 ]
check "  asked for repository:ns/app:pull" grep -q "repository:ns/app:pull auth=-" "$TOKEN_LOG"
fresh
: > "$TOKEN_LOG"
check "Bearer: --creds sent as Basic to the token service" pull --insecure --creds "$REG_USER:$REG_PASS" "$TOKEN/ns/app:v1"
check "  with Basic" grep -q "auth=basic" "$TOKEN_LOG"
check "Bearer: a wrong password: a clear error" \
    fails_with "refused the credentials" --insecure --creds "$REG_USER:wrong" "$TOKEN/ns/app:v1"

# ---- faults (a proxy in front of the plain registry) ----
reg_proxy "$PLAIN"
PROXY=$PROXY_ADDR
fresh
echo 429:2 > "$PROXY_MODE"
check "429 twice (Retry-After: 1), then 200: the pull succeeds" pull --insecure "$PROXY/ns/app:v1"
check "  it said it tried again" out_has "trying again"
check "  all present" all_present "$V1"
fresh
echo truncate-once > "$PROXY_MODE"; : > "$PROXY_LOG"
check "a blob cut in half once: resumed" pull --insecure "$PROXY/ns/app:v1"
check "  with a Range request" grep -q "blobs/$LAYER bytes=" "$PROXY_LOG"
check "  all present" all_present "$V1"
fresh
echo truncate > "$PROXY_MODE"
check "a blob always cut: fails after its retries" fails_with "gave up after 6 tries" --insecure "$PROXY/ns/app:v1"
check "  the blob is not in the store" bash -c '! [ -e "$0" ]' "$MOAT_HOME/images/blobs/sha256/${LAYER#sha256:}"
fresh
echo corrupt > "$PROXY_MODE"
check "a corrupted blob is refused" fails_with "nothing kept" --insecure "$PROXY/ns/app:v1"
BAD=$(grep -o 'blob sha256:[0-9a-f]*: its content has digest' "$REG_TMP/out" | head -1 | cut -d' ' -f2 | cut -d: -f2)
check "  the error names the blob, one of the image's" bash -c '[ -n "$1" ] && grep -q "$1" <<<"$0"' \
    "$V1_BLOBS" "$BAD"
check "  nothing of it kept (blobs/, tmp/)" \
    bash -c '[ -n "$1" ] && ! ls "$0"/blobs/sha256 "$0"/tmp 2>/dev/null | grep -q "$1"' "$MOAT_HOME/images" "$BAD"
echo pass > "$PROXY_MODE"
check "  a pull after it succeeds" pull --insecure "$PROXY/ns/app:v1"
fresh
echo extend > "$PROXY_MODE"
check "a blob longer than its descriptor says is refused" \
    fails_with "larger than its descriptor" --insecure "$PROXY/ns/app:v1"
check "  nothing in blobs/ but what was verified" bash -c '! [ -e "$0" ]' "$MOAT_HOME/images/blobs/sha256/${LAYER#sha256:}"
echo schema1 > "$PROXY_MODE"
check "a Docker schema 1 manifest is refused" \
    fails_with "schema 1" --insecure "$PROXY/ns/app:v1"
echo bigchallenge > "$PROXY_MODE"
check "a WWW-Authenticate over 8 KiB is refused" fails_with "longer than moat reads" --insecure "$PROXY/ns/app:v1"
echo bigmanifest > "$PROXY_MODE"
check "a manifest over 4 MiB is refused" \
    fails_with "larger than" --insecure "$PROXY/ns/app:v1"

# kill -9 in the middle of a download, then again
fresh
echo slow > "$PROXY_MODE"
"$MOAT" image pull --insecure "$PROXY/ns/app:v1" >/dev/null 2>&1 &
pid=$!
i=0
while [ $i -lt 200 ] && ! [ -s "$MOAT_HOME/images/tmp/${LAYER#sha256:}" ]; do sleep 0.05; i=$((i + 1)); done
sleep 0.3
kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
check "killed mid-download: a partial blob in tmp/, none in blobs/" \
    bash -c '[ -s "$0/tmp/$1" ] && ! [ -e "$0/blobs/sha256/$1" ]' "$MOAT_HOME/images" "${LAYER#sha256:}"
echo pass > "$PROXY_MODE"; : > "$PROXY_LOG"
check "  the next pull completes" pull --insecure "$PROXY/ns/app:v1"
check "  resuming with Range" grep -q "blobs/$LAYER bytes=" "$PROXY_LOG"
check "  all present" all_present "$V1"

# Ctrl-C (SIGINT) in the middle of a download: exit 130, the partial blob kept
fresh
echo slow > "$PROXY_MODE"
"$MOAT" image pull --insecure "$PROXY/ns/app:v1" >"$REG_TMP/out" 2>&1 &
pid=$!
i=0
while [ $i -lt 200 ] && ! [ -s "$MOAT_HOME/images/tmp/${LAYER#sha256:}" ]; do sleep 0.05; i=$((i + 1)); done
kill -INT $pid; wait $pid; rc=$?
check "SIGINT mid-download: exit 130" [ $rc = 130 ]
check "  says it was interrupted" out_has "interrupted"
check "  the partial blob stays in tmp/" [ -s "$MOAT_HOME/images/tmp/${LAYER#sha256:}" ]

# on a terminal: one line per blob, updated in place
if command -v script >/dev/null; then
    fresh
    script -qec "'$MOAT' image pull --insecure '$PROXY/ns/app:v1'" /dev/null >"$REG_TMP/out" 2>&1
    check "a terminal: progress updated in place (CR, erase line)" grep -q $'\r\033\[K' "$REG_TMP/out"
    check "  and a done line per blob" [ "$(grep -c ': done' "$REG_TMP/out")" = "$(echo "$V1_BLOBS" | wc -l)" ]
else
    skip "progress on a terminal: no script(1)"
fi

# two pulls at once
fresh
echo slow > "$PROXY_MODE"; : > "$PROXY_LOG"
"$MOAT" image pull --insecure "$PROXY/ns/app:v1" >"$REG_TMP/out1" 2>&1 & p1=$!
"$MOAT" image pull --insecure "$PROXY/ns/app:v1" >"$REG_TMP/out2" 2>&1 & p2=$!
wait $p1; r1=$?; wait $p2; r2=$?
check "two pulls at once both succeed" [ $r1 = 0 -a $r2 = 0 ]
check "  each blob downloaded once" \
    bash -c '[ -z "$(grep "^GET .*/blobs/" "$0" | cut -d" " -f2 | sort | uniq -d)" ] && [ "$(grep -c "^GET .*/blobs/" "$0")" = "$1" ]' \
    "$PROXY_LOG" "$(echo "$V1_BLOBS" | wc -l)"
check "  all present" all_present "$V1"

# a redirect of the blobs to a second server (Basic registry behind the proxy)
reg_blobsrv "$BASIC"
reg_proxy "$BASIC" "http://$BLOBSRV_ADDR"
echo redirect > "$PROXY_MODE"
fresh
check "blobs redirected to another server: followed" pull --insecure --creds "$REG_USER:$REG_PASS" "$PROXY_ADDR/ns/app:v1"
check "  all present" all_present "$V1"
check "  the second server got the blob requests" grep -q "/blobs/$LAYER" "$BLOBSRV_LOG"
check "  ... without the Authorization header" bash -c 'grep -q . "$0" && ! grep -v "auth=-$" "$0" | grep -q .' "$BLOBSRV_LOG"

echo "image-pull: $fails failure(s)"
[ $fails = 0 ]
