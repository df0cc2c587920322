# tests/integration/registry.sh: loopback registries for the image tests,
# sourced (after checks.sh). Everything listens on 127.0.0.1 only.
#
#   reg_need                      SKIPPED (exit 0) without docker-registry,
#                                 skopeo, umoci, openssl, htpasswd, python3
#                                 with cryptography
#   reg_init                      REG_TMP (a temp dir) and the test CA and
#                                 certificates; reg_cleanup (trap'ed) stops
#                                 everything started and removes REG_TMP
#   reg_start plain|tls|basic|token
#                                 Debian's docker-registry (distribution 2.8)
#                                 on a free port: REG_ADDR (127.0.0.1:PORT);
#                                 tls: REG_CA is its CA; basic: htpasswd with
#                                 REG_USER:REG_PASS; token: Bearer tokens from
#                                 a token service this starts (TOKEN_LOG: one
#                                 line per token request; anonymous gets pull)
#   reg_proxy UPSTREAM [REDIRECT] a fault proxy: PROXY_ADDR, PROXY_MODE (a file:
#                                 echo MODE > $PROXY_MODE; registry_aux.py
#                                 lists the modes), PROXY_LOG
#   reg_blobsrv UPSTREAM          the second server of a redirect (logs each
#                                 request's Authorization): BLOBSRV_ADDR, BLOBSRV_LOG
#   reg_layout DIR                an OCI layout made with umoci: tag v1 (two
#                                 gzip layers: small files, a 4 MiB random
#                                 file), tag multi (an index: v1 as
#                                 linux/amd64 and a linux/arm64 copy;
#                                 LAYOUT_AMD64, LAYOUT_ARM64 their digests)
#   reg_push SRC DEST [skopeo options]
#                                 skopeo copy SRC docker://DEST (no TLS check)
#   reg_push_dir SRC ADDR NAME:TAG none|zstd
#                                 SRC with its layers uncompressed or zstd,
#                                 pushed as is (plain HTTP); prints the digest
REG_AUX=$(dirname "${BASH_SOURCE[0]:-$0}")/registry_aux.py
REG_PIDS=""
REG_USER=moat
REG_PASS=s3cret-pw

reg_need() {
    need_tools docker-registry skopeo umoci openssl htpasswd python3 curl
    python3 -c 'import cryptography' 2>/dev/null ||
        { echo "SKIPPED: $SUITE: python3-cryptography is not installed (scripts/deps.sh installs it)"; exit 0; }
}

reg_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

reg_bg() {   # reg_bg LOG CMD...: start CMD in the background (output to LOG.out), remember its pid
    local out=$1.out; shift
    "$@" >>"$out" 2>&1 &
    REG_PIDS="$REG_PIDS $!"
}

reg_cleanup() {
    for p in $REG_PIDS; do kill "$p" 2>/dev/null; done
    for p in $REG_PIDS; do wait "$p" 2>/dev/null; done
    REG_PIDS=""
    [ -n "${REG_TMP:-}" ] && rm -rf "$REG_TMP"
}

reg_init() {
    REG_TMP=$(mktemp -d /tmp/moat-registry.XXXXXX)
    trap reg_cleanup EXIT
    local d=$REG_TMP/pki
    mkdir -p "$d"
    (cd "$d" &&
     openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=moat-test-ca -keyout ca.key -out ca.crt \
         -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign &&
     openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout srv.key -out srv.csr &&
     printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' > srv.ext &&
     openssl x509 -req -in srv.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile srv.ext -out srv.crt &&
     openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=moat-test-token -keyout token.key -out token.crt
    ) >"$REG_TMP/pki.log" 2>&1 || { cat "$REG_TMP/pki.log"; return 1; }
    REG_CA=$d/ca.crt
}

reg_wait() {   # reg_wait URL [curl options]: until it answers (any status)
    local i=0
    while [ $i -lt 100 ]; do
        curl -s -o /dev/null "$@" && return 0
        sleep 0.1; i=$((i + 1))
    done
    echo "reg_wait: $1 never answered" >&2
    return 1
}

reg_token_service() {   # TOKEN_ADDR, TOKEN_LOG
    local port; port=$(reg_port)
    TOKEN_ADDR=127.0.0.1:$port
    TOKEN_LOG=$REG_TMP/token-$port.log
    : > "$TOKEN_LOG"
    reg_bg "$TOKEN_LOG" python3 "$REG_AUX" token "$port" "$REG_TMP/pki/token.crt" "$REG_TMP/pki/token.key" \
        moat-test-issuer moat-registry "$REG_USER:$REG_PASS" "$TOKEN_LOG" 1
    reg_wait "http://$TOKEN_ADDR/token"
}

reg_start() {
    local kind=$1 port dir
    port=$(reg_port)
    dir=$REG_TMP/reg-$port
    mkdir -p "$dir/data"
    REG_ADDR=127.0.0.1:$port
    {
        printf 'version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n'
        printf 'storage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\n' "$dir/data"
        printf 'http:\n  addr: %s\n  secret: moat-test-%s\n' "$REG_ADDR" "$port"
        [ "$kind" = tls ] && printf '  tls:\n    certificate: %s\n    key: %s\n' "$REG_TMP/pki/srv.crt" "$REG_TMP/pki/srv.key"
        if [ "$kind" = basic ]; then
            htpasswd -Bbn "$REG_USER" "$REG_PASS" > "$dir/htpasswd"
            printf 'auth:\n  htpasswd:\n    realm: moat-test\n    path: %s\n' "$dir/htpasswd"
        fi
        if [ "$kind" = token ]; then
            reg_token_service >&2
            printf 'auth:\n  token:\n    realm: http://%s/token\n    service: moat-registry\n' "$TOKEN_ADDR"
            printf '    issuer: moat-test-issuer\n    rootcertbundle: %s\n' "$REG_TMP/pki/token.crt"
        fi
    } > "$dir/config.yml"
    reg_bg "$dir/registry" docker-registry serve "$dir/config.yml"
    if [ "$kind" = tls ]; then
        reg_wait "https://$REG_ADDR/v2/" --cacert "$REG_CA"
    else
        reg_wait "http://$REG_ADDR/v2/"
    fi
}

reg_proxy() {
    local port; port=$(reg_port)
    PROXY_ADDR=127.0.0.1:$port
    PROXY_MODE=$REG_TMP/proxy-$port.mode
    PROXY_LOG=$REG_TMP/proxy-$port.log
    echo pass > "$PROXY_MODE"
    : > "$PROXY_LOG"
    reg_bg "$PROXY_LOG" python3 "$REG_AUX" proxy "$port" "$1" "$PROXY_MODE" "$PROXY_LOG" ${2:+"$2"}
    reg_wait "http://$PROXY_ADDR/v2/" && : > "$PROXY_LOG"
}

reg_blobsrv() {
    local port; port=$(reg_port)
    BLOBSRV_ADDR=127.0.0.1:$port
    BLOBSRV_LOG=$REG_TMP/blobsrv-$port.log
    : > "$BLOBSRV_LOG"
    reg_bg "$BLOBSRV_LOG" python3 "$REG_AUX" blobsrv "$port" "$1" "$REG_USER:$REG_PASS" "$BLOBSRV_LOG"
    reg_wait "http://$BLOBSRV_ADDR/" && : > "$BLOBSRV_LOG"
}

reg_layout() {
    local l=$1 b=$REG_TMP/bundle
    {
        umoci init --layout "$l" &&
        umoci new --image "$l:base" &&
        umoci unpack --rootless --image "$l:base" "$b" &&
        mkdir -p "$b/rootfs/etc" "$b/rootfs/data" &&
        echo "hello from moat's test image" > "$b/rootfs/hello" &&
        echo 'root:x:0:0:root:/root:/bin/sh' > "$b/rootfs/etc/passwd" &&
        umoci repack --refresh-bundle --image "$l:one" "$b" &&
        head -c 4194304 /dev/urandom > "$b/rootfs/data/random.bin" &&
        umoci repack --image "$l:v1" "$b" &&
        umoci config --image "$l:v1" --config.cmd /hello --os linux --architecture amd64
    } >"$REG_TMP/umoci.log" 2>&1 || { cat "$REG_TMP/umoci.log"; return 1; }
    set -- $(python3 "$REG_AUX" index "$l" v1 multi) || return 1
    LAYOUT_AMD64=$1 LAYOUT_ARM64=$2
}

reg_push_dir() {   # reg_push_dir SRC ADDR NAME:TAG none|zstd: SRC's layers uncompressed or zstd
    local d=$REG_TMP/dir-none z=$REG_TMP/dir-zstd
    rm -rf "$d" "$z"
    { skopeo copy -q --dest-decompress "$1" "dir:$d" &&
      { [ "$4" = none ] || skopeo copy -q --dest-compress --dest-compress-format zstd "dir:$d" "dir:$z"; } &&
      python3 "$REG_AUX" pushdir "$2" "$3" "$REG_TMP/dir-$4"; } \
        2>"$REG_TMP/skopeo.log" || { cat "$REG_TMP/skopeo.log" >&2; return 1; }
}

reg_push() {
    local src=$1 dst=$2; shift 2
    skopeo copy -q --dest-tls-verify=false "$@" "$src" "docker://$dst" >"$REG_TMP/skopeo.log" 2>&1 ||
        { cat "$REG_TMP/skopeo.log"; return 1; }
}
