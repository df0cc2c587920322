#!/bin/sh
# The Firecracker-compatible API (`moat vmm`, docs/control-api.md) driven
# through its Unix socket with curl, as the Go SDK, Kata Containers and a
# sandbox platform drive Firecracker (docs/orchestrators.md). The HTTP and
# request checks need no KVM; those that boot a guest (tests/guests) print
# SKIPPED without a usable /dev/kvm. One PASS:/FAIL:/SKIPPED: line a check.
#
#   MOAT_BIN=build/moat MOAT_GUESTS=build/guests tests/integration/fc-api.sh
set -u
MOAT=${MOAT_BIN:-build/moat}
GUESTS=${MOAT_GUESTS:-build/guests}
case $MOAT in /*) ;; *) MOAT=$PWD/$MOAT ;; esac
case $GUESTS in /*) ;; *) GUESTS=$PWD/$GUESTS ;; esac
T=$(mktemp -d /tmp/moat-fcapi.XXXXXX)
fails=0
PIDS=""
cleanup() {
    for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$T"
}
trap cleanup EXIT INT TERM

SUITE=fc-api
. "$(dirname "$0")/checks.sh"
need_tools curl socat
probe_kvm

# ---- helpers ----
SOCK=""
# start_vmm NAME ARGS...: moat vmm in the background, console to $T/NAME.out,
# stderr to $T/NAME.err; waits for its socket (when it has one).
start_vmm() {
    n=$1; shift
    "$MOAT" vmm "$@" >"$T/$n.out" 2>"$T/$n.err" &
    VPID=$!
    PIDS="$PIDS $VPID"
}
wait_sock() {
    i=0
    while [ $i -lt 100 ]; do
        [ -S "$1" ] && return 0
        sleep 0.05; i=$((i + 1))
    done
    return 1
}
# req METHOD PATH [BODY]: sets CODE and BODY.
req() {
    if [ $# -ge 3 ]; then
        printf '%s' "$3" >"$T/req.body"
        out=$(curl -s --max-time 20 --unix-socket "$SOCK" -X "$1" -H 'Content-Type: application/json' \
              --data-binary @"$T/req.body" -w '\n%{http_code}' "http://localhost$2")
    else
        out=$(curl -s --max-time 20 --unix-socket "$SOCK" -X "$1" -w '\n%{http_code}' "http://localhost$2")
    fi
    CODE=$(printf '%s' "$out" | tail -n 1)
    BODY=$(printf '%s' "$out" | sed '$d')
}
# expect NAME METHOD PATH BODY CODE [EXACT-BODY | ~SUBSTRING]
expect() {
    name=$1 m=$2 p=$3 b=$4 want=$5
    if [ -n "$b" ]; then req "$m" "$p" "$b"; else req "$m" "$p"; fi
    if [ "$CODE" != "$want" ]; then
        fail "$name: $m $p: got $CODE, want $want ($BODY)"; return
    fi
    if [ $# -ge 6 ]; then
        case $6 in
        "~"*) case $BODY in *"${6#\~}"*) ;; *) fail "$name: $m $p: body '$BODY' lacks '${6#\~}'"; return ;; esac ;;
        *) [ "$BODY" = "$6" ] || { fail "$name: $m $p: body '$BODY', want '$6'"; return; } ;;
        esac
    fi
    pass "$name"
}
stop_vmm() {   # stop_vmm PID: SIGTERM, wait up to 10 s; EXIT gets the status
    kill -TERM "$1" 2>/dev/null
    i=0
    while kill -0 "$1" 2>/dev/null && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
    if kill -0 "$1" 2>/dev/null; then EXIT=timeout; kill -9 "$1"; wait "$1" 2>/dev/null; return; fi
    wait "$1"; EXIT=$?
}
ticks() { c=$(grep -c '^tick ' "$1" 2>/dev/null); echo "${c:-0}"; }
guest_done() {  # guest_done PID N NAME: wait up to N x 50 ms for moat vmm PID to end; else a failure and SIGKILL
    local i=0
    while kill -0 "$1" 2>/dev/null && [ $i -lt "$2" ]; do sleep 0.05; i=$((i + 1)); done
    kill -0 "$1" 2>/dev/null && { fail "$3: the guest did not finish"; kill -9 "$1"; }
    return 0
}
# Seccomp (docs/security.md): the Seccomp: field (0 none, 2 filter) of a
# thread of PID, by its name; of the main thread; of every thread.
thread_seccomp() {  # thread_seccomp PID COMM
    for t in /proc/$1/task/*; do
        [ "$(cat "$t/comm" 2>/dev/null)" = "$2" ] && { awk '/^Seccomp:/ {print $2}' "$t/status"; return; }
    done
}
main_seccomp() { awk '/^Seccomp:/ {print $2}' "/proc/$1/status" 2>/dev/null; }
all_seccomp() { cat /proc/$1/task/*/status 2>/dev/null | awk '/^Seccomp:/ {print $2}' | sort -u | tr '\n' ' '; }
wait_main_filtered() {  # the main thread filters itself once the VM has run
    i=0
    while [ "$(main_seccomp "$1")" != 2 ] && [ $i -lt 100 ]; do sleep 0.02; i=$((i + 1)); done
    [ "$(main_seccomp "$1")" = 2 ]
}
all_filtered() {  # every thread: "Seccomp: 2"
    wait_main_filtered "$1" && [ "$(all_seccomp "$1")" = "2 " ] && return 0
    echo "  (Seccomp values of $1's threads: $(all_seccomp "$1"))"; return 1
}
# The sanitizer build leaves the main thread unfiltered (its leak check at
# exit makes calls no list has): its main-thread checks say so and skip.
SAN=0
"$MOAT" seccomp | grep -q 'sanitizer build' && SAN=1
# A forbidden call: exit 159 and exactly one line naming the thread kind and
# the call (the test hook MOAT_SECCOMP_TEST_VIOLATE=KIND calls getppid).
violation_line() {  # violation_line FILE KIND
    [ "$(grep -c 'moat: seccomp: ' "$1")" = 1 ] &&
        grep -q "^moat: seccomp: the $2 thread made a forbidden system call: getppid ([0-9]*); exiting with status 159\$" "$1"
}
violated() {  # violated STATUS FILE KIND
    [ "$1" = 159 ] && violation_line "$2" "$3" && return 0
    echo "  (exit $1; stderr: $(cat "$2"))"; return 1
}
wait_ticks() {  # wait_ticks FILE N
    i=0
    while [ "$(ticks "$1")" -lt "$2" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
    [ "$(ticks "$1")" -ge "$2" ]
}

# ---- command line ----
out=$("$MOAT" vmm --version)
first=$(printf '%s\n' "$out" | head -n 1)
ver=$(printf '%s\n' "$first" | cut -d' ' -f2)
check "--version: Kata reads the second word of the first line (v1.7.0)" [ "$ver" = v1.7.0 ]
ln -s "$MOAT" "$T/firecracker"
check "run as 'firecracker' (a link): Firecracker's command line" \
    sh -c "'$T/firecracker' --version | head -n 1 | grep -q '^moat v1.7.0$'"
"$MOAT" vmm --bogus >/dev/null 2>&1; rc=$?
check "unknown flag: exit 153 (Firecracker's argument error) [$rc]" [ "$rc" = 153 ]
"$MOAT" vmm --no-api >/dev/null 2>&1; rc=$?
check "--no-api without --config-file: exit 153 [$rc]" [ "$rc" = 153 ]
"$MOAT" vmm --id 'bad id!' --api-sock "$T/x.sock" >/dev/null 2>&1; rc=$?
check "bad --id: exit 153 [$rc]" [ "$rc" = 153 ]
printf '{"boot-source": {"kernel_image_path": 3}}' >"$T/bad.json"
"$MOAT" vmm --no-api --config-file "$T/bad.json" >/dev/null 2>"$T/bad.err"; rc=$?
check "bad config file: exit 152, names the field [$rc]" \
    sh -c "[ $rc = 152 ] && grep -q 'kernel_image_path' '$T/bad.err'"
printf '{"boot-source": {"kernel_image_path": 3}, "some-future-section": {"x": 1}}' >"$T/fut.json"
"$MOAT" vmm --no-api --config-file "$T/fut.json" >/dev/null 2>"$T/fut.err"; rc=$?
check "config file: an unknown top-level key is ignored (as Firecracker): the error is the bad field's [$rc]" \
    sh -c "[ $rc = 152 ] && grep -q 'kernel_image_path' '$T/fut.err' && ! grep -q 'some-future-section' '$T/fut.err'"
out=$("$MOAT" vmm --snapshot-version); rc=$?
check "--snapshot-version: the snapshot format version, then exit 0 [$rc: $out]" sh -c "[ $rc = 0 ] && [ '$out' = v3.0.0 ]"
printf 'MOATSNAP\003\000\000\000' >"$T/fake.snap"
out=$("$MOAT" vmm --describe-snapshot "$T/fake.snap"); rc=$?
check "--describe-snapshot FILE: the file's format version, then exit 0 [$rc: $out]" sh -c "[ $rc = 0 ] && [ '$out' = v3.0.0 ]"
"$MOAT" vmm --describe-snapshot "$T/bad.json" >"$T/ds.out" 2>"$T/ds.err"; rc=$?
check "--describe-snapshot of no snapshot: exit 1, says so [$rc]" \
    sh -c "[ $rc = 1 ] && [ ! -s '$T/ds.out' ] && grep -q 'not a moat snapshot' '$T/ds.err'"
"$MOAT" vmm --http-api-max-payload-size 0 --api-sock "$T/x.sock" >/dev/null 2>"$T/x.err"; rc=$?
check "--http-api-max-payload-size 0: exit 153, the value's range [$rc]" \
    sh -c "[ $rc = 153 ] && grep -q \"invalid --http-api-max-payload-size '0' (bytes, 1 to 16777216)\" '$T/x.err'"
"$MOAT" vmm --mmds-size-limit x --api-sock "$T/x.sock" >/dev/null 2>"$T/x.err"; rc=$?
check "--mmds-size-limit x: exit 153, the value's range [$rc]" \
    sh -c "[ $rc = 153 ] && grep -q \"invalid --mmds-size-limit 'x' (bytes\" '$T/x.err'"
printf '{"a":"0123456789"}' >"$T/md.json"
"$MOAT" vmm --metadata "$T/md.json" --mmds-size-limit 10 --api-sock "$T/x.sock" >/dev/null 2>"$T/md.err"; rc=$?
check "--metadata FILE over --mmds-size-limit: exit 1, says so [$rc]" \
    sh -c "[ $rc = 1 ] && grep -q 'MMDS limit exceeded' '$T/md.err'"
printf '{"boot-source": {"kernel_image_path": "/x"}, "balloon": {"amount_mib": 1}}' >"$T/bal.json"
"$MOAT" vmm --no-api --config-file "$T/bal.json" >/dev/null 2>"$T/bal.err"; rc=$?
check "config file with a balloon: exit 152, not supported [$rc]" \
    sh -c "[ $rc = 152 ] && grep -q 'balloon' '$T/bal.err'"

# ---- libmicrohttpd: loaded when the API server starts (vmm/api/mhd_dyn.c) ----
check "the moat binary does not link libmicrohttpd (nor GnuTLS)" \
    sh -c "! readelf -d '$MOAT' | grep -Eq 'NEEDED.*(libmicrohttpd|libgnutls)'"
mhdlib=$(ldconfig -p | awk '/libmicrohttpd\.so\.[0-9]+ .*x86-64/ {print $NF; exit}')
if [ "$(id -u)" != 0 ] || [ -z "$mhdlib" ] || ! command -v unshare >/dev/null; then
    echo "SKIPPED: fc-api: moat vmm without libmicrohttpd (needs root, unshare and the library's path)"
else
    unshare -m sh -c "mount --bind /dev/null '$mhdlib' && '$MOAT' --version >'$T/nolib.ver' &&
                      '$MOAT' vmm --api-sock '$T/nolib.sock'" >/dev/null 2>"$T/nolib.err"; rc=$?
    check "without libmicrohttpd: moat runs, moat vmm --api-sock exits 1 naming the library [$rc: $(head -c 200 "$T/nolib.err")]" \
        sh -c "[ $rc = 1 ] && grep -q '^moat ' '$T/nolib.ver' && grep -q 'cannot load libmicrohttpd' '$T/nolib.err' && [ ! -e '$T/nolib.sock' ]"
fi

# ---- seccomp (no KVM needed): the lists, the API thread ----
"$MOAT" seccomp >"$T/sc.out"
extra=$(sed -n 's/^(sanitizer build: \([0-9]*\) of these.*/\1/p' "$T/sc.out"); extra=${extra:-0}
api_n=$(awk '$1 == "api" {print $2}' "$T/sc.out"); fcmain_n=$(awk '$1 == "fcmain" {print $2}' "$T/sc.out")
check "moat seccomp lists the API thread's kind within Firecracker's API limit ($api_n <= 31 + $extra)" \
    sh -c "[ -n '$api_n' ] && [ '$api_n' -le $((31 + extra)) ]"
check "moat seccomp lists moat vmm's main thread's kind within the VMM limit ($fcmain_n <= 50 + $extra)" \
    sh -c "[ -n '$fcmain_n' ] && [ '$fcmain_n' -le $((50 + extra)) ]"
"$MOAT" vmm --no-seccomp --seccomp-filter /dev/null --api-sock "$T/x.sock" >/dev/null 2>"$T/x.err"; rc=$?
check "--no-seccomp with --seccomp-filter: exit 153 [$rc]" sh -c "[ $rc = 153 ] && grep -q 'exclude each other' '$T/x.err'"
MOAT_SECCOMP_TEST_VIOLATE=api timeout 20 "$MOAT" vmm --api-sock "$T/viol.sock" >/dev/null 2>"$T/viol.err"; rc=$?
check "seccomp: a forbidden call on the API thread ends moat vmm: 159 [$rc] and one line naming it" \
    violated $rc "$T/viol.err" api
SOCK=$T/audit.sock
MOAT_SECCOMP_TEST_VIOLATE=api "$MOAT" vmm --seccomp-audit --api-sock "$SOCK" >/dev/null 2>"$T/audit.err" &
AUD=$!; PIDS="$PIDS $AUD"
wait_sock "$SOCK" || fail "audit: no socket: $(cat "$T/audit.err")"
expect "--seccomp-audit: the API thread's forbidden call is logged, not fatal: GET / answers" GET / "" 200 "~Not started"
check "--seccomp-audit: the API thread is still filtered (Seccomp 2)" [ "$(thread_seccomp $AUD fc_api)" = 2 ]
stop_vmm $AUD
check "--seccomp-audit: SIGTERM: exit 0 [$EXIT]" [ "$EXIT" = 0 ]

# ---- HTTP and requests before boot (no KVM needed) ----
SOCK=$T/api.sock
start_vmm pre --api-sock "$SOCK" --id pre-1 --seccomp-filter /dev/null --start-time-us 1 --start-time-cpu-us 2
PRE=$VPID
if ! wait_sock "$SOCK"; then
    fail "moat vmm did not open its socket: $(cat "$T/pre.err")"
    exit 1
fi
check "socket is mode 0600" [ "$(stat -c %a "$SOCK")" = 600 ]
expect "GET /" GET / "" 200 '{"id":"pre-1","state":"Not started","vmm_version":"1.7.0","app_name":"moat"}'
check "seccomp: the API thread (fc_api) answers under its filter (Seccomp 2)" [ "$(thread_seccomp $PRE fc_api)" = 2 ]
check "seccomp: before boot the main thread is not filtered yet (Seccomp 0)" [ "$(main_seccomp $PRE)" = 0 ]
check "--seccomp-filter F: accepted, a warning says F is not loaded" grep -q 'seccomp-filter /dev/null: not loaded' "$T/pre.err"
expect "GET /version" GET /version "" 200 '{"firecracker_version":"1.7.0"}'
expect "GET /machine-config default" GET /machine-config "" 200 \
    '{"vcpu_count":1,"mem_size_mib":128,"smt":false,"track_dirty_pages":false}'
expect "unknown path" GET /nothing "" 400 '{"fault_message":"Invalid request method and/or path: GET /nothing."}'
expect "wrong method" DELETE /machine-config "" 400 \
    '{"fault_message":"Invalid request method and/or path: DELETE /machine-config."}'
expect "POST is not a method here" POST /actions '{}' 400 "~Invalid request method"
expect "bad JSON" PUT /machine-config '{"vcpu_count":' 400 "~bad JSON body"
expect "unknown field" PUT /machine-config '{"vcpu_count":1,"mem_size_mib":64,"vcpus":2}' 400 \
    '{"fault_message":"unknown field `vcpus`"}'
expect "wrong type" PUT /machine-config '{"vcpu_count":true,"mem_size_mib":64}' 400 \
    '{"fault_message":"field `vcpu_count`: expected an unsigned integer"}'
expect "missing field" PUT /machine-config '{"vcpu_count":1}' 400 \
    '{"fault_message":"missing required field `mem_size_mib`"}'
expect "PUT /machine-config" PUT /machine-config '{"vcpu_count":2,"mem_size_mib":64,"smt":false}' 204 ""
expect "PATCH /machine-config" PATCH /machine-config '{"mem_size_mib":96}' 204 ""
expect "PATCH /machine-config {}: Firecracker's empty PATCH" PATCH /machine-config '{}' 400 \
    '{"fault_message":"Empty PATCH request."}'
expect "PATCH with no body" PATCH /machine-config "" 400 '{"fault_message":"Empty PATCH request."}'
expect "GET with a body" GET /machine-config '{}' 400 '{"fault_message":"GET request cannot have a body."}'
expect "GET with a body, any path" GET /nothing '{"a":1}' 400 '{"fault_message":"GET request cannot have a body."}'
expect "GET /machine-config after PUT+PATCH" GET /machine-config "" 200 \
    '{"vcpu_count":2,"mem_size_mib":96,"smt":false,"track_dirty_pages":false}'
expect "PUT with no body" PUT /boot-source "" 400 '{"fault_message":"Empty PUT request."}'
expect "drive id mismatch" PUT /drives/rootfs '{"drive_id":"x","path_on_host":"/dev/null","is_root_device":true}' \
    400 '{"fault_message":"The id from the path does not match the id from the body!"}'
expect "bad drive id in path" PUT /drives/a-b '{}' 400 "~Invalid ID"
expect "drive file missing" PUT /drives/d1 '{"drive_id":"d1","path_on_host":"/nonexistent","is_root_device":false}' \
    400 "~/nonexistent"
expect "PATCH /drives before boot" PATCH /drives/d1 '{"drive_id":"d1","path_on_host":"/x"}' 400 \
    '{"fault_message":"The requested operation is not supported before starting the microVM."}'
expect "PUT /network-interfaces" PUT /network-interfaces/eth0 \
    '{"iface_id":"eth0","host_dev_name":"fcapitap0","guest_mac":"AA:FC:00:00:00:01","rx_rate_limiter":{"bandwidth":{"size":100000,"refill_time":100}},"tx_rate_limiter":{"ops":{"size":100,"one_time_burst":10,"refill_time":1000}}}' 204 ""
expect "PUT /network-interfaces, mtu out of range" PUT /network-interfaces/eth2 \
    '{"iface_id":"eth2","host_dev_name":"fcapitap2","mtu":67}' 400 \
    '{"fault_message":"field `mtu`: 67 is out of range (68 .. 65535)"}'
expect "PUT /network-interfaces with mtu" PUT /network-interfaces/eth2 \
    '{"iface_id":"eth2","host_dev_name":"fcapitap2","mtu":1400}' 204 ""
expect "GET /vm/config: the interface's mtu" GET /vm/config "" 200 '~"host_dev_name":"fcapitap2","rx_rate_limiter":null,"tx_rate_limiter":null,"mtu":1400}'
expect "network interface: tap in use" PUT /network-interfaces/eth1 '{"iface_id":"eth1","host_dev_name":"fcapitap0"}' \
    400 "~already in use"
expect "PUT /mmds/config, unknown interface" PUT /mmds/config '{"network_interfaces":["eth9"]}' 400 "~eth9"
expect "PUT /mmds/config, no version" PUT /mmds/config '{"network_interfaces":["eth0"]}' 204 ""
expect "GET /vm/config: MMDS version V1 when unset (Firecracker's default)" GET /vm/config "" 200 \
    '~"mmds-config":{"version":"V1","network_interfaces":["eth0"]'
expect "PUT /mmds/config" PUT /mmds/config '{"version":"V2","network_interfaces":["eth0"]}' 204 ""
expect "GET /mmds, empty" GET /mmds "" 200 '{}'
expect "PUT /mmds" PUT /mmds '{"latest":{"meta-data":{"id":"i-1","tags":{"a":"b"}}}}' 204 ""
expect "PATCH /mmds" PATCH /mmds '{"latest":{"meta-data":{"tags":null,"zone":"z"}}}' 204 ""
expect "GET /mmds after merge" GET /mmds "" 200 '{"latest":{"meta-data":{"id":"i-1","zone":"z"}}}'
expect "PUT /mmds not an object" PUT /mmds '[1]' 400 "~expected a JSON object"
expect "PUT /vsock bad cid" PUT /vsock '{"guest_cid":2,"uds_path":"/tmp/v"}' 400 "~guest_cid"
expect "PUT /entropy bad field" PUT /entropy '{"rate":1}' 400 '{"fault_message":"unknown field `rate`"}'
expect "PUT /entropy bad limiter" PUT /entropy '{"rate_limiter":{"bandwidth":{"size":"x"}}}' 400 "~size"
expect "PUT /entropy" PUT /entropy '{"rate_limiter":{"ops":{"size":100,"refill_time":1000}}}' 204 ""
expect "GET /vm/config lists the entropy device" GET /vm/config "" 200 '~"entropy":{"rate_limiter":{'
expect "balloon: not supported" PUT /balloon '{"amount_mib":1,"deflate_on_oom":false}' 400 \
    '{"fault_message":"The balloon device is not supported by moat."}'
expect "GET /balloon/statistics: not supported" GET /balloon/statistics "" 400 "~balloon"
expect "PATCH /vm before boot" PATCH /vm '{"state":"Paused"}' 400 \
    '{"fault_message":"The requested operation is not supported before starting the microVM."}'
expect "snapshot create before boot" PUT /snapshot/create '{"snapshot_path":"/s","mem_file_path":"/m"}' 400 \
    "~not supported before starting"
expect "snapshot load after configuring" PUT /snapshot/load '{"snapshot_path":"/s","mem_file_path":"/m"}' 400 \
    '{"fault_message":"Loading a microVM snapshot not allowed after configuring boot-specific resources."}'
expect "InstanceStart without a kernel" PUT /actions '{"action_type":"InstanceStart"}' 400 \
    '{"fault_message":"Cannot start microvm without kernel configuration."}'
expect "FlushMetrics before boot (a runtime action, as in Firecracker)" PUT /actions '{"action_type":"FlushMetrics"}' \
    400 '{"fault_message":"The requested operation is not supported before starting the microVM."}'
expect "SendCtrlAltDel before boot" PUT /actions '{"action_type":"SendCtrlAltDel"}' 400 "~before starting"
expect "unknown action" PUT /actions '{"action_type":"Reboot"}' 400 "~unknown variant \`Reboot\`"
expect "GET /vm/config" GET /vm/config "" 200 "~\"network-interfaces\":[{\"iface_id\":\"eth0\",\"host_dev_name\":\"fcapitap0\",\"rx_rate_limiter\":{\"bandwidth\":{\"size\":100000,\"refill_time\":100}},\"tx_rate_limiter\":{\"ops\":{\"size\":100,\"one_time_burst\":10,\"refill_time\":1000}},\"guest_mac\":\"AA:FC:00:00:00:01\"}"

# Transport rules.
head -c 51201 /dev/zero | tr '\0' ' ' >"$T/big"
code=$(curl -s -o "$T/big.out" -w '%{http_code}' --unix-socket "$SOCK" -X PUT --data-binary @"$T/big" \
       http://localhost/mmds)
check "body over 51200 bytes: 400 [$code]" \
    sh -c "[ $code = 400 ] && grep -q 'larger than the limit of 51200' '$T/big.out'"
head -c 51200 /dev/zero | tr '\0' ' ' >"$T/max"; printf '{}' | dd of="$T/max" conv=notrunc 2>/dev/null
code=$(curl -s -o /dev/null -w '%{http_code}' --unix-socket "$SOCK" -X PUT --data-binary @"$T/max" \
       http://localhost/mmds)
check "body of exactly 51200 bytes is taken [$code]" [ "$code" = 204 ]
code=$(curl -s -o "$T/ch.out" -w '%{http_code}' --unix-socket "$SOCK" -X PUT -H 'Transfer-Encoding: chunked' \
       --data-binary '{"state":"Paused"}' http://localhost/vm)
check "chunked body: 400 [$code]" sh -c "[ $code = 400 ] && grep -q 'Content-Length' '$T/ch.out'"
hdr=$(head -c 40000 /dev/zero | tr '\0' a)
code=$(curl -s -o /dev/null -w '%{http_code}' --unix-socket "$SOCK" -H "X-Big: $hdr" http://localhost/)
check "headers over the limit: 4xx [$code]" sh -c "[ $code -ge 400 ] && [ $code -lt 500 ]"
hdr=$(head -c 6000 /dev/zero | tr '\0' a)
code=$(curl -s -o /dev/null -w '%{http_code}' --unix-socket "$SOCK" -H "X-Big: $hdr" http://localhost/)
check "6 KB of headers are fine [$code]" [ "$code" = 200 ]
# Keep-alive: two requests on one connection (curl reuses it).
n=$(curl -s -v --unix-socket "$SOCK" http://localhost/ http://localhost/version 2>&1 | grep -c 'Re-using existing connection')
check "keep-alive: curl reuses the connection" [ "$n" -ge 1 ]
# Pipelined: two requests written at once, two answers in order.
printf 'GET /version HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' |
    socat -t 5 - UNIX-CONNECT:"$SOCK" >"$T/pipe.out" 2>/dev/null
check "pipelined requests: two answers, in order" \
    sh -c "[ \$(grep -c 'HTTP/1.1 200' '$T/pipe.out') = 2 ] && grep -q firecracker_version '$T/pipe.out' && grep -q Not.started '$T/pipe.out'"
# A client that trickles its request does not hold up the others.
(printf 'GET / HT'; sleep 4; printf 'TP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n') |
    socat -t 6 - UNIX-CONNECT:"$SOCK" >"$T/trickle.out" 2>/dev/null &
TRICKLE=$!
sleep 0.3
start=$(date +%s%N)
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 --unix-socket "$SOCK" http://localhost/)
ms=$((($(date +%s%N) - start) / 1000000))
check "a trickling client does not block another ($code in ${ms} ms)" [ "$code" = 200 ]
# 11 connections at once: 11 idle ones held open, then 11 requests in parallel.
for i in 1 2 3 4 5 6 7 8 9 10 11; do
    sleep 3 | socat - UNIX-CONNECT:"$SOCK" >/dev/null 2>&1 &
done
sleep 0.3
for i in 1 2 3 4 5 6 7 8 9 10 11; do
    curl -s -o /dev/null -w '%{http_code}\n' --max-time 5 --unix-socket "$SOCK" http://localhost/version >"$T/c$i" &
done
wait_ok=0
for i in 1 2 3 4 5 6 7 8 9 10 11; do :; done
sleep 1
i=0; while [ $i -lt 50 ] && [ "$(cat "$T"/c* 2>/dev/null | grep -c 200)" -lt 11 ]; do sleep 0.1; i=$((i + 1)); done
check "11 concurrent connections (plus 11 idle ones) all answered" [ "$(cat "$T"/c* | grep -c '^200$')" = 11 ]
wait $TRICKLE 2>/dev/null
check "the trickling client got its answer in the end" grep -q 'HTTP/1.1 200' "$T/trickle.out"
stop_vmm $PRE
check "SIGTERM before boot: exit 0 [$EXIT]" [ "$EXIT" = 0 ]
check "the socket is removed at exit" [ ! -e "$SOCK" ]
grep -q 'Received Error. Status code: 400' "$T/pre.err"
check "errors are logged in Firecracker's line format" \
    grep -qE '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+ \[pre-1:fc_api\] Received Error' "$T/pre.err"

# ---- limits from the command line, --metadata, the metrics line (no KVM needed) ----
SOCK=$T/lim.sock
printf '{"seed":{"k":"v"}}' >"$T/seed.json"
start_vmm lim --api-sock "$SOCK" --id lim-1 --http-api-max-payload-size 200 --mmds-size-limit 40 --metadata "$T/seed.json"
LIM=$VPID
if wait_sock "$SOCK"; then
    expect "--metadata FILE: the MMDS data store starts with it" GET /mmds "" 200 '{"seed":{"k":"v"}}'
    expect "--mmds-size-limit: PUT /mmds over it: 413" PUT /mmds '{"a":"0123456789012345678901234567890123456789"}' \
        413 '{"fault_message":"MMDS limit exceeded error: The MMDS patch request doesn'"'"'t fit."}'
    expect "--mmds-size-limit: PUT /mmds within it" PUT /mmds '{"a":"0123456789"}' 204 ""
    expect "--mmds-size-limit: PATCH /mmds growing over it: 413" PATCH /mmds '{"b":"0123456789012345678901"}' \
        413 "~MMDS limit exceeded"
    expect "--mmds-size-limit: the data store is unchanged" GET /mmds "" 200 '{"a":"0123456789"}'
    head -c 201 /dev/zero | tr '\0' ' ' >"$T/b201"
    code=$(curl -s -o "$T/b201.out" -w '%{http_code}' --unix-socket "$SOCK" -X PUT --data-binary @"$T/b201" \
           http://localhost/mmds)
    check "--http-api-max-payload-size 200: a body of 201 bytes: 400 [$code]" \
        sh -c "[ $code = 400 ] && grep -q 'larger than the limit of 200 allowed' '$T/b201.out'"
    expect "PUT /metrics with emit_id and properties" PUT /metrics \
        "{\"metrics_path\":\"$T/lim.metrics\",\"emit_id\":true,\"properties\":{\"team\":\"a\",\"cell\":\"b-1\"}}" 204 ""
    expect "GET /vm/config: the metrics' emit_id and properties" GET /vm/config "" 200 \
        "~\"metrics\":{\"metrics_path\":\"$T/lim.metrics\",\"emit_id\":true,\"properties\":{\"cell\":\"b-1\",\"team\":\"a\"}}"
    stop_vmm $LIM
    check "limits: SIGTERM: exit 0 [$EXIT]" [ "$EXIT" = 0 ]
    line=$(tail -n 1 "$T/lim.metrics" 2>/dev/null)
    check "the metrics line at exit: top-level id and properties (emit_id, properties)" \
        sh -c "printf '%s' '$line' | grep -qF '\"id\":\"lim-1\",\"properties\":{\"cell\":\"b-1\",\"team\":\"a\"}'"
    check "the metrics line carries no empty object (no latency measured, no VM) [$line]" \
        sh -c "[ -n '$line' ] && ! printf '%s' '$line' | grep -qF '{}' && ! printf '%s' '$line' | grep -q latencies_us"
else
    fail "moat vmm with --http-api-max-payload-size, --mmds-size-limit, --metadata: no socket: $(cat "$T/lim.err")"
    kill -9 $LIM 2>/dev/null
fi

# ---- with a guest ----
if [ "$KVM" = 0 ]; then
    skip "booting, pausing, snapshots, restore, config file: $KVM_WHY"
    [ $fails = 0 ]; exit
fi
COUNTER=$GUESTS/counter.elf
[ -r "$COUNTER" ] || { fail "test guest $COUNTER missing (make test-guests)"; exit 1; }
truncate -s 1M "$T/root.img" "$T/root2.img" "$T/data.img" "$T/da,ta=1.img"
: >"$T/placeholder.img"     # as Kata's placeholder drives: empty files
truncate -s 2M "$T/big.img"

# The Go SDK's sequence (machine.go: startVMM, then the handlers in order).
SOCK=$T/sdk.sock
: >"$T/sdk.log"; : >"$T/sdk.metrics"
start_vmm sdk --api-sock "$SOCK" --id sdk-vm --start-time-us 0 --start-time-cpu-us 0
SDK=$VPID
wait_sock "$SOCK" || fail "sdk: no socket"
expect "sdk: GET /machine-config (readiness poll)" GET /machine-config "" 200 "~vcpu_count"
expect "sdk: PUT /logger" PUT /logger "{\"log_path\":\"$T/sdk.log\",\"level\":\"Debug\",\"show_level\":true,\"show_log_origin\":false}" 204 ""
expect "sdk: PUT /metrics" PUT /metrics "{\"metrics_path\":\"$T/sdk.metrics\"}" 204 ""
expect "sdk: PUT /metrics twice" PUT /metrics "{\"metrics_path\":\"$T/sdk.metrics\"}" 400 \
    '{"fault_message":"Reinitialization of metrics not allowed."}'
expect "sdk: PUT /machine-config" PUT /machine-config '{"vcpu_count":1,"mem_size_mib":64,"smt":false,"track_dirty_pages":true}' 204 ""
expect "sdk: GET /machine-config" GET /machine-config "" 200 \
    '{"vcpu_count":1,"mem_size_mib":64,"smt":false,"track_dirty_pages":true}'
expect "sdk: PUT /boot-source" PUT /boot-source "{\"kernel_image_path\":\"$COUNTER\",\"boot_args\":\"spin=20000\"}" 204 ""
expect "sdk: PUT /drives/rootfs" PUT /drives/rootfs "{\"drive_id\":\"rootfs\",\"path_on_host\":\"$T/root.img\",\"is_root_device\":true,\"is_read_only\":false,\"rate_limiter\":{\"bandwidth\":{\"size\":10000000,\"refill_time\":100}}}" 204 ""
expect "sdk: PUT /drives/data (a path with ',' and '=')" PUT /drives/data "{\"drive_id\":\"data\",\"path_on_host\":\"$T/da,ta=1.img\",\"is_root_device\":false,\"is_read_only\":true,\"io_engine\":\"Sync\",\"cache_type\":\"Unsafe\"}" 204 ""
expect "sdk: second root drive" PUT /drives/r2 "{\"drive_id\":\"r2\",\"path_on_host\":\"$T/data.img\",\"is_root_device\":true}" 400 \
    '{"fault_message":"A root block device already exists!"}'
expect "sdk: PUT /vsock" PUT /vsock "{\"guest_cid\":3,\"uds_path\":\"$T/sdk-v.sock\"}" 204 ""
expect "sdk: InstanceStart" PUT /actions '{"action_type":"InstanceStart"}' 204 ""
expect "sdk: GET / Running" GET / "" 200 '{"id":"sdk-vm","state":"Running","vmm_version":"1.7.0","app_name":"moat"}'
check "sdk: the guest runs (console ticks)" wait_ticks "$T/sdk.out" 3
check "sdk: vCPU thread named 'fc_vcpu 0'" sh -c "cat /proc/$SDK/task/*/comm | grep -qx 'fc_vcpu 0'"
check "sdk: seccomp: the vCPU thread 'fc_vcpu 0' is filtered (Seccomp 2)" [ "$(thread_seccomp $SDK 'fc_vcpu 0')" = 2 ]
check "sdk: seccomp: the API thread 'fc_api' is filtered (Seccomp 2)" [ "$(thread_seccomp $SDK fc_api)" = 2 ]
if [ $SAN = 1 ]; then
    skip "sdk: seccomp: the main thread after boot: the sanitizer build leaves it unfiltered (leak check at exit)"
else
    check "sdk: seccomp: the main thread is filtered once the VM runs (Seccomp 2)" wait_main_filtered $SDK
    check "sdk: seccomp: every thread of moat vmm is filtered" all_filtered $SDK
fi
expect "sdk: InstanceStart twice" PUT /actions '{"action_type":"InstanceStart"}' 400 \
    '{"fault_message":"The requested operation is not supported after starting the microVM."}'
expect "sdk: PUT /boot-source after boot" PUT /boot-source '{"kernel_image_path":"/k"}' 400 "~after starting"
expect "sdk: PUT /machine-config after boot" PUT /machine-config '{"vcpu_count":1,"mem_size_mib":64}' 400 "~after starting"
expect "sdk: PUT /drives after boot" PUT /drives/x "{\"drive_id\":\"x\",\"path_on_host\":\"$T/data.img\",\"is_root_device\":false}" 400 "~after starting"
expect "sdk: PATCH /drives rate_limiter" PATCH /drives/rootfs '{"drive_id":"rootfs","rate_limiter":{"bandwidth":{"size":5000000,"refill_time":100},"ops":{"size":1000,"refill_time":1000}}}' 204 ""
expect "sdk: PATCH /drives unknown drive" PATCH /drives/nope '{"drive_id":"nope","rate_limiter":{}}' 400 "~nope"
expect "sdk: PATCH /drives path_on_host: a missing file" PATCH /drives/data "{\"drive_id\":\"data\",\"path_on_host\":\"$T/none.img\"}" 400 "~none.img"
expect "sdk: the drive keeps its file" GET /vm/config "" 200 "~da,ta=1.img"
expect "sdk: PATCH /drives path_on_host (a bigger file)" PATCH /drives/data "{\"drive_id\":\"data\",\"path_on_host\":\"$T/big.img\"}" 204 ""
expect "sdk: GET /vm/config has the new file" GET /vm/config "" 200 "~\"path_on_host\":\"$T/big.img\""
expect "sdk: PATCH /drives path_on_host and rate_limiter" PATCH /drives/rootfs "{\"drive_id\":\"rootfs\",\"path_on_host\":\"$T/root2.img\",\"rate_limiter\":{}}" 204 ""
expect "sdk: snapshot while running" PUT /snapshot/create "{\"snapshot_path\":\"$T/s1\",\"mem_file_path\":\"$T/m1\"}" 400 "~must be paused"
expect "sdk: PATCH /vm Paused" PATCH /vm '{"state":"Paused"}' 204 ""
expect "sdk: GET / Paused" GET / "" 200 '{"id":"sdk-vm","state":"Paused","vmm_version":"1.7.0","app_name":"moat"}'
before=$(ticks "$T/sdk.out"); sleep 0.3
check "sdk: paused: no ticks" [ "$(ticks "$T/sdk.out")" = "$before" ]
expect "sdk: PUT /snapshot/create Full" PUT /snapshot/create "{\"snapshot_type\":\"Full\",\"snapshot_path\":\"$T/snap\",\"mem_file_path\":\"$T/mem\"}" 204 ""
expect "sdk: PUT /snapshot/create Diff" PUT /snapshot/create "{\"snapshot_type\":\"Diff\",\"snapshot_path\":\"$T/dsnap\",\"mem_file_path\":\"$T/dmem\"}" 204 ""
expect "sdk: PATCH /vm Resumed" PATCH /vm '{"state":"Resumed"}' 204 ""
check "sdk: ticks again after resume" wait_ticks "$T/sdk.out" $((before + 2))
expect "sdk: FlushMetrics" PUT /actions '{"action_type":"FlushMetrics"}' 204 ""
check "sdk: a metrics line with Firecracker's keys" \
    sh -c "grep -q '\"put_api_requests\"' '$T/sdk.metrics' && grep -q '\"actions_count\"' '$T/sdk.metrics' && grep -q '\"full_create_snapshot\"' '$T/sdk.metrics' && grep -q '\"pause_vm\"' '$T/sdk.metrics'"
check "sdk: Firecracker's block and block_rootfs objects from the drives' counters" \
    grep -qE '"block_rootfs":\{"read_bytes":[0-9]+,"write_bytes":[0-9]+,"read_count":[0-9]+,"write_count":[0-9]+,"flush_count":[0-9]+,"invalid_reqs_count":[0-9]+,"execute_fails":[0-9]+,"update_count":1,"update_fails":0\}.*"block":\{"read_bytes"' "$T/sdk.metrics"
check "sdk: block_data counts the failed and the good swap" grep -qE '"block_data":\{[^}]*"update_count":1,"update_fails":1\}' "$T/sdk.metrics"
check "sdk: no made-up zeros: a figure moat lacks is absent (no 'no_avail_buffer' key)" sh -c "! grep -q '\"no_avail_buffer\"' '$T/sdk.metrics'"
check "sdk: api_server startup times from --start-time-us/--start-time-cpu-us" \
    grep -qE '"api_server":\{"process_startup_time_us":[1-9][0-9]*,"process_startup_time_cpu_us":[0-9]+\}' "$T/sdk.metrics"
# The counter guest never reads its keyboard: the first Ctrl+Alt+Del is
# queued, the second finds the i8042's buffer full (Firecracker's error).
expect "sdk: SendCtrlAltDel" PUT /actions '{"action_type":"SendCtrlAltDel"}' 204 ""
expect "sdk: SendCtrlAltDel again, unread: 400" PUT /actions '{"action_type":"SendCtrlAltDel"}' 400 "~i8042 internal buffer full"
expect "sdk: GET /vm/config after boot" GET /vm/config "" 200 "~\"drive_id\":\"rootfs\""
check "sdk: logger file in Firecracker's format with levels" \
    grep -qE '^[0-9-]+T[0-9:.]+ \[sdk-vm:[a-z_]+:(INFO|ERROR|DEBUG)\] ' "$T/sdk.log"
stop_vmm $SDK
check "sdk: SIGTERM while running: exit 0 [$EXIT]" [ "$EXIT" = 0 ]
check "sdk: a last metrics line at exit" [ "$(wc -l <"$T/sdk.metrics")" -ge 2 ]

# The sandbox platform's resume (and the SDK's snapshot start): metrics,
# load with resume_vm false, patch limiters, resume, MMDS.
SOCK=$T/e2b.sock
start_vmm e2b --api-sock "$SOCK" --id e2b-vm
E2B=$VPID
wait_sock "$SOCK" || fail "e2b: no socket"
expect "e2b: PUT /metrics" PUT /metrics "{\"metrics_path\":\"$T/e2b.metrics\"}" 204 ""
expect "e2b: load with Uffd, nobody serving the socket" PUT /snapshot/load "{\"snapshot_path\":\"$T/snap\",\"mem_backend\":{\"backend_type\":\"Uffd\",\"backend_path\":\"$T/nobody.sock\"},\"resume_vm\":false}" 400 "~Load snapshot error"
expect "e2b: load of a missing snapshot" PUT /snapshot/load "{\"snapshot_path\":\"$T/none\",\"mem_backend\":{\"backend_type\":\"File\",\"backend_path\":\"$T/mem\"}}" 400 "~Load snapshot error"
expect "e2b: load with clock_realtime: refused, naming the field" PUT /snapshot/load "{\"snapshot_path\":\"$T/snap\",\"mem_file_path\":\"$T/mem\",\"clock_realtime\":true}" 400 \
    '{"fault_message":"field `clock_realtime`: not supported by moat (use false; a restored guest with the guest agent gets its wall clock set from the host)"}'
expect "e2b: load with huge_pages 2M: refused, naming the field" PUT /snapshot/load "{\"snapshot_path\":\"$T/snap\",\"mem_file_path\":\"$T/mem\",\"huge_pages\":\"2M\"}" 400 \
    '{"fault_message":"field `huge_pages`: `2M` is not supported by moat (guest memory is not backed by huge pages: use None or Snapshot)"}'
out=$("$MOAT" vmm --describe-snapshot "$T/snap"); rc=$?
check "--describe-snapshot of a snapshot moat vmm made: v3.0.0 [$rc: $out]" sh -c "[ $rc = 0 ] && [ '$out' = v3.0.0 ]"
expect "e2b: PUT /snapshot/load File, vsock_override, clock_realtime false, huge_pages None" PUT /snapshot/load "{\"snapshot_path\":\"$T/snap\",\"mem_backend\":{\"backend_type\":\"File\",\"backend_path\":\"$T/mem\"},\"enable_diff_snapshots\":true,\"resume_vm\":false,\"vsock_override\":{\"uds_path\":\"$T/e2b-v.sock\"},\"clock_realtime\":false,\"huge_pages\":\"None\"}" 204 ""
check "e2b: vsock_override: the restored vsock device listens on the new path" [ -S "$T/e2b-v.sock" ]
expect "e2b: GET / Paused after load" GET / "" 200 '{"id":"e2b-vm","state":"Paused","vmm_version":"1.7.0","app_name":"moat"}'
check "e2b: seccomp: loaded, not yet run: the main thread is not filtered yet (Seccomp 0)" [ "$(main_seccomp $E2B)" = 0 ]
req GET /vm/config
check "e2b: GET /vm/config after load: the snapshot's drives (rootfs on the file swapped in before the snapshot)" \
    sh -c "printf '%s' '$BODY' | grep -qF '{\"drive_id\":\"rootfs\",\"path_on_host\":\"$T/root2.img\",\"is_root_device\":false,\"is_read_only\":false,'"
check "e2b: ... the read-only data drive" sh -c "printf '%s' '$BODY' | grep -qF '\"drive_id\":\"data\",\"path_on_host\":\"$T/big.img\",\"is_root_device\":false,\"is_read_only\":true,'"
check "e2b: ... the drive's limiter as the snapshot records it" sh -c "printf '%s' '$BODY' | grep -qF '\"bandwidth\":{\"size\":10000000'"
check "e2b: ... the vsock device, on vsock_override's path" sh -c "printf '%s' '$BODY' | grep -qF '\"vsock\":{\"guest_cid\":3,\"uds_path\":\"$T/e2b-v.sock\"}'"
check "e2b: ... the machine's shape" sh -c "printf '%s' '$BODY' | grep -qF '\"machine-config\":{\"vcpu_count\":1,\"mem_size_mib\":64,\"smt\":false,\"track_dirty_pages\":true}'"
expect "e2b: load twice" PUT /snapshot/load "{\"snapshot_path\":\"$T/snap\",\"mem_file_path\":\"$T/mem\"}" 400 "~after starting"
expect "e2b: PATCH /drives/rootfs rate_limiter" PATCH /drives/rootfs '{"drive_id":"rootfs","rate_limiter":{"bandwidth":{"size":1000000,"one_time_burst":100000,"refill_time":100}}}' 204 ""
expect "e2b: PATCH /vm Resumed" PATCH /vm '{"state":"Resumed"}' 204 ""
expect "e2b: GET / Running" GET / "" 200 '{"id":"e2b-vm","state":"Running","vmm_version":"1.7.0","app_name":"moat"}'
check "e2b: seccomp: the restored VM's vCPU thread is filtered (Seccomp 2)" [ "$(thread_seccomp $E2B 'fc_vcpu 0')" = 2 ]
if [ $SAN = 1 ]; then
    skip "e2b: seccomp: the main thread after the resume: unfiltered in the sanitizer build"
else
    check "e2b: seccomp: the main thread is filtered once the loaded VM runs (Seccomp 2)" wait_main_filtered $E2B
fi
check "e2b: the restored guest counts on" wait_ticks "$T/e2b.out" 2
first=$(grep -m1 '^tick ' "$T/e2b.out" | cut -d' ' -f2)
check "e2b: it goes on from the snapshot's count (first tick $first = $before or next)" \
    sh -c "[ '$first' -ge '$before' ] && [ '$first' -le $((before + 1)) ]"
expect "e2b: PUT /mmds after resume" PUT /mmds '{"sandbox":{"id":"s1"}}' 204 ""
expect "e2b: GET /mmds" GET /mmds "" 200 '{"sandbox":{"id":"s1"}}'
expect "e2b: PATCH /vm Paused" PATCH /vm '{"state":"Paused"}' 204 ""
expect "e2b: PUT /snapshot/create Full again" PUT /snapshot/create "{\"snapshot_type\":\"Full\",\"snapshot_path\":\"$T/snap2\",\"mem_file_path\":\"$T/mem2\"}" 204 ""
check "e2b: the snapshot files exist" [ -s "$T/snap2" ] && [ -e "$T/mem2" ]
stop_vmm $E2B
check "e2b: SIGTERM: exit 0 [$EXIT]" [ "$EXIT" = 0 ]

# Network interfaces on a TAP, in a network namespace of this test's own
# (root, /dev/net/tun, unshare, iproute2): InstanceStart opens the TAP,
# limiters and the metadata service are changed at run time, a snapshot
# with the interface loads with network_overrides onto another TAP.
SOCK=$T/none.sock
start_vmm notap --api-sock "$SOCK"
NOTAP=$VPID
wait_sock "$SOCK"
expect "net: boot-source" PUT /boot-source "{\"kernel_image_path\":\"$COUNTER\",\"boot_args\":\"spin=20000\"}" 204 ""
expect "net: PUT an interface on a device that is no TAP (lo)" PUT /network-interfaces/eth0 '{"iface_id":"eth0","host_dev_name":"lo"}' 204 ""
expect "net: InstanceStart when the TAP cannot be opened: 400" PUT /actions '{"action_type":"InstanceStart"}' 400 "~Cannot start microvm: "
expect "net: still Not started" GET / "" 200 "~\"state\":\"Not started\""
stop_vmm $NOTAP
if [ "$(id -u)" = 0 ] && [ -c /dev/net/tun ] && command -v ip >/dev/null && unshare -n true 2>/dev/null; then
    SOCK=$T/net.sock
    unshare -n sh -c 'ip link set lo up && ip tuntap add dev fcapitap0 mode tap && ip tuntap add dev fcapitap1 mode tap &&
        ip link set fcapitap0 up && ip link set fcapitap1 up && exec "$0" vmm --api-sock "$1" --id net-vm' \
        "$MOAT" "$SOCK" >"$T/net.out" 2>"$T/net.err" &
    NET=$!; PIDS="$PIDS $NET"
    wait_sock "$SOCK" || fail "net: no socket: $(cat "$T/net.err")"
    expect "net: boot-source" PUT /boot-source "{\"kernel_image_path\":\"$COUNTER\",\"boot_args\":\"spin=20000\"}" 204 ""
    expect "net: PUT /metrics" PUT /metrics "{\"metrics_path\":\"$T/net.metrics\"}" 204 ""
    expect "net: PUT /network-interfaces/eth0" PUT /network-interfaces/eth0 '{"iface_id":"eth0","host_dev_name":"fcapitap0","guest_mac":"06:00:ac:10:00:02","tx_rate_limiter":{"bandwidth":{"size":1000000,"refill_time":100}}}' 204 ""
    expect "net: PUT /mmds/config" PUT /mmds/config '{"version":"V2","network_interfaces":["eth0"]}' 204 ""
    expect "net: PUT /mmds before boot" PUT /mmds '{"latest":{"meta-data":{"instance-id":"i-1"}}}' 204 ""
    expect "net: InstanceStart opens the TAP" PUT /actions '{"action_type":"InstanceStart"}' 204 ""
    check "net: the guest runs" wait_ticks "$T/net.out" 2
    expect "net: PATCH tx_rate_limiter" PATCH /network-interfaces/eth0 '{"iface_id":"eth0","tx_rate_limiter":{"bandwidth":{"size":500000,"refill_time":100},"ops":{"size":100,"refill_time":1000}}}' 204 ""
    expect "net: PATCH rx_rate_limiter off" PATCH /network-interfaces/eth0 '{"iface_id":"eth0","rx_rate_limiter":{}}' 204 ""
    expect "net: PATCH an unknown interface" PATCH /network-interfaces/eth7 '{"iface_id":"eth7","rx_rate_limiter":{}}' 400 "~eth7"
    expect "net: PUT /mmds reaches the metadata service" PUT /mmds '{"latest":{"meta-data":{"instance-id":"i-2"}}}' 204 ""
    expect "net: PATCH /mmds" PATCH /mmds '{"latest":{"meta-data":{"zone":"z1"}}}' 204 ""
    expect "net: FlushMetrics" PUT /actions '{"action_type":"FlushMetrics"}' 204 ""
    check "net: metrics have Firecracker's net and net_eth0 objects" \
        grep -qE '"net_eth0":\{"tx_packets_count":[0-9]+,"tx_bytes_count":[0-9]+,"tx_rate_limiter_throttled":[0-9]+,"rx_packets_count":[0-9]+,"rx_bytes_count":[0-9]+,"rx_rate_limiter_throttled":[0-9]+\}.*"net":\{"tx_packets_count"' "$T/net.metrics"
    expect "net: PATCH /vm Paused" PATCH /vm '{"state":"Paused"}' 204 ""
    expect "net: snapshot with the interface" PUT /snapshot/create "{\"snapshot_path\":\"$T/nsnap\",\"mem_file_path\":\"$T/nmem\"}" 204 ""
    stop_vmm $NET
    check "net: SIGTERM: exit 0 [$EXIT]" [ "$EXIT" = 0 ]
    SOCK=$T/net2.sock
    unshare -n sh -c 'ip link set lo up && ip tuntap add dev fcapitap1 mode tap && ip link set fcapitap1 up &&
        exec "$0" vmm --api-sock "$1" --id net-vm2' "$MOAT" "$SOCK" >"$T/net2.out" 2>"$T/net2.err" &
    NET2=$!; PIDS="$PIDS $NET2"
    wait_sock "$SOCK" || fail "net: no socket: $(cat "$T/net2.err")"
    expect "net: load with an override onto no TAP (lo)" PUT /snapshot/load "{\"snapshot_path\":\"$T/nsnap\",\"mem_file_path\":\"$T/nmem\",\"network_overrides\":[{\"iface_id\":\"eth0\",\"host_dev_name\":\"lo\"}]}" 400 "~Load snapshot error"
    expect "net: load with network_overrides onto fcapitap1" PUT /snapshot/load "{\"snapshot_path\":\"$T/nsnap\",\"mem_file_path\":\"$T/nmem\",\"network_overrides\":[{\"iface_id\":\"eth0\",\"host_dev_name\":\"fcapitap1\"}],\"resume_vm\":true}" 204 ""
    expect "net: Running after load" GET / "" 200 "~\"state\":\"Running\""
    check "net: the restored guest runs" wait_ticks "$T/net2.out" 2
    expect "net: PATCH the restored interface" PATCH /network-interfaces/eth0 '{"iface_id":"eth0","tx_rate_limiter":{"bandwidth":{"size":100000,"refill_time":100}}}' 204 ""
    stop_vmm $NET2
    check "net: SIGTERM: exit 0 [$EXIT]" [ "$EXIT" = 0 ]
else
    skip "network interfaces on a TAP: needs root, /dev/net/tun, ip and unshare -n"
fi

# PATCH /drives path_on_host seen from inside: the blk test guest
# ("blkswap") prints capacity and sector 0's first byte at start and after
# each config-change interrupt.
BLKG=$GUESTS/blk.elf
if [ -r "$BLKG" ]; then
    truncate -s 1M "$T/sw1.img"; printf 'A' | dd of="$T/sw1.img" conv=notrunc status=none
    truncate -s 2M "$T/sw2.img"; printf 'B' | dd of="$T/sw2.img" conv=notrunc status=none
    SOCK=$T/swap.sock
    start_vmm swap --api-sock "$SOCK" --id swap-vm
    SWAP=$VPID
    wait_sock "$SOCK" || fail "swap: no socket"
    expect "swap: boot-source (blk guest)" PUT /boot-source "{\"kernel_image_path\":\"$BLKG\",\"boot_args\":\"blkswap\"}" 204 ""
    expect "swap: PUT /drives/d0" PUT /drives/d0 "{\"drive_id\":\"d0\",\"path_on_host\":\"$T/sw1.img\",\"is_root_device\":false,\"is_read_only\":true}" 204 ""
    expect "swap: InstanceStart" PUT /actions '{"action_type":"InstanceStart"}' 204 ""
    swap_seen() { i=0; while ! grep -qx "swap: $1" "$T/swap.out" && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done; grep -qx "swap: $1" "$T/swap.out"; }
    check "swap: the guest sees the first file (2048 sectors, 'A')" swap_seen "cap 2048 byte 65"
    expect "swap: PATCH path_on_host to a 2 MiB file" PATCH /drives/d0 "{\"drive_id\":\"d0\",\"path_on_host\":\"$T/sw2.img\"}" 204 ""
    check "swap: config-change interrupt: the guest reads the new capacity and content" swap_seen "cap 4096 byte 66"
    truncate -s 3M "$T/sw2.img"
    expect "swap: PATCH the same path after the file grew" PATCH /drives/d0 "{\"drive_id\":\"d0\",\"path_on_host\":\"$T/sw2.img\"}" 204 ""
    check "swap: the guest sees the grown file" swap_seen "cap 6144 byte 66"
    i=0; while kill -0 $SWAP 2>/dev/null && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
    wait $SWAP; rc=$?
    check "swap: the guest finished cleanly (exit $rc)" [ "$rc" = 0 ]
else
    fail "test guest $BLKG missing (make test-guests)"
fi

# Kata: --config-file with the API, poll GET / until Running, PATCH a
# placeholder drive, SIGTERM.
cat >"$T/kata.json" <<EOF
{
  "boot-source": {"kernel_image_path": "$COUNTER", "boot_args": "spin=20000"},
  "machine-config": {"vcpu_count": 1, "mem_size_mib": 64, "smt": false},
  "drives": [
    {"drive_id": "rootfs", "path_on_host": "$T/root.img", "is_root_device": false, "is_read_only": true},
    {"drive_id": "drive_0", "path_on_host": "$T/placeholder.img", "is_root_device": false, "is_read_only": false}
  ],
  "vsock": {"guest_cid": 3, "uds_path": "$T/kata-v.sock"},
  "logger": {"log_path": "$T/kata.log", "level": "Info", "show_level": false, "show_log_origin": false},
  "metrics": {"metrics_path": "$T/kata.metrics"}
}
EOF
SOCK=$T/kata.sock
start_vmm kata --api-sock "$SOCK" --id kata-1 --config-file "$T/kata.json"
KATA=$VPID
wait_sock "$SOCK" || fail "kata: no socket"
i=0; state=""
while [ $i -lt 100 ]; do
    req GET /; case $BODY in *'"state":"Running"'*) state=Running; break ;; esac
    sleep 0.05; i=$((i + 1))
done
check "kata: GET / reaches Running" [ "$state" = Running ]
check "kata: the guest runs" wait_ticks "$T/kata.out" 2
expect "kata: GET /vm/config is the config file's" GET /vm/config "" 200 "~\"drive_id\":\"drive_0\""
expect "kata: PATCH /drives/drive_0 path_on_host onto a file in use (locked)" PATCH /drives/drive_0 "{\"drive_id\":\"drive_0\",\"path_on_host\":\"$T/root.img\"}" 400 "~locked"
expect "kata: PATCH /drives/drive_0 path_on_host (the placeholder gets its file)" PATCH /drives/drive_0 "{\"drive_id\":\"drive_0\",\"path_on_host\":\"$T/data.img\"}" 204 ""
expect "kata: GET /vm/config names the new file" GET /vm/config "" 200 "~\"path_on_host\":\"$T/data.img\""
check "kata: the guest runs on after the swap" wait_ticks "$T/kata.out" 4
expect "kata: PATCH /drives/drive_0 back to the empty placeholder (hot unplug)" PATCH /drives/drive_0 "{\"drive_id\":\"drive_0\",\"path_on_host\":\"$T/placeholder.img\"}" 204 ""
check "kata: vCPU thread prefix fc_vcpu" sh -c "cat /proc/$KATA/task/*/comm | grep -q '^fc_vcpu'"
stop_vmm $KATA
check "kata: SIGTERM: exit 0 [$EXIT]" [ "$EXIT" = 0 ]

# --no-api: the config file alone.
start_vmm noapi --no-api --config-file "$T/kata.json" --id noapi-1
NOAPI=$VPID
check "--no-api: the guest boots from the config file" wait_ticks "$T/noapi.out" 2
if [ $SAN = 1 ]; then
    skip "--no-api: seccomp: the main thread: unfiltered in the sanitizer build"
else
    check "--no-api: seccomp: every thread filtered, the main one too" all_filtered $NOAPI
fi
check "--no-api: no socket" [ ! -e /run/firecracker.socket ] || [ "$(stat -c %Y /run/firecracker.socket)" -lt "$(date +%s)" ]
stop_vmm $NOAPI
check "--no-api: SIGTERM: exit 0 [$EXIT]" [ "$EXIT" = 0 ]

# Seccomp with a guest: off with --no-seccomp; a forbidden call on a vCPU
# thread and on the main thread (once the VM runs) ends moat vmm with 159
# and the line; --seccomp-audit logs it and goes on.
printf '{"boot-source": {"kernel_image_path": "%s", "boot_args": "spin=20000"}, "machine-config": {"vcpu_count": 1, "mem_size_mib": 64, "smt": false}}' \
    "$COUNTER" >"$T/min.json"
start_vmm nosc --no-api --config-file "$T/min.json" --no-seccomp
NOSC=$VPID
check "--no-seccomp: the guest boots" wait_ticks "$T/nosc.out" 2
check "--no-seccomp: no thread is filtered (Seccomp 0) [$(all_seccomp $NOSC)]" [ "$(all_seccomp $NOSC)" = "0 " ]
check "--no-seccomp: the vCPU thread is named 'fc_vcpu 0' all the same" [ "$(thread_seccomp $NOSC 'fc_vcpu 0')" = 0 ]
stop_vmm $NOSC
check "--no-seccomp: SIGTERM: exit 0 [$EXIT]" [ "$EXIT" = 0 ]
for kind in vcpu fcmain; do
    if [ $kind = fcmain ] && [ $SAN = 1 ]; then
        skip "seccomp: a forbidden call on moat vmm's main thread: unfiltered in the sanitizer build"
        continue
    fi
    MOAT_SECCOMP_TEST_VIOLATE=$kind timeout 20 "$MOAT" vmm --no-api --config-file "$T/min.json" >"$T/v$kind.out" \
        2>"$T/v$kind.err"; rc=$?
    check "seccomp: a forbidden call on moat vmm's $kind thread ends it: 159 [$rc] and one line naming it" \
        violated $rc "$T/v$kind.err" $kind
done
if [ $SAN = 1 ]; then
    skip "--seccomp-audit on the main thread: unfiltered in the sanitizer build"
else
    export MOAT_SECCOMP_TEST_VIOLATE=fcmain
    start_vmm scaudit --no-api --config-file "$T/min.json" --seccomp-audit
    unset MOAT_SECCOMP_TEST_VIOLATE
    SCA=$VPID
    check "--seccomp-audit: the main thread's forbidden call is logged, the guest runs on" wait_ticks "$T/scaudit.out" 2
    check "--seccomp-audit: the main thread is filtered all the same (Seccomp 2)" wait_main_filtered $SCA
    stop_vmm $SCA
    check "--seccomp-audit: SIGTERM: exit 0 [$EXIT]" [ "$EXIT" = 0 ]
fi

# The sandbox platform's resume with mem_backend Uffd: our page-fault
# handler (tests/integration/uffd_handler.c) serves the snapshot's memory
# from another process (docs/uffd.md).
HANDLER=${MOAT_UFFD_HANDLER:-$(dirname "$MOAT")/tests/uffd_handler}
if [ ! -x "$HANDLER" ]; then
    fail "uffd: page-fault handler $HANDLER missing (make build/tests/uffd_handler)"
elif [ "$(cat /proc/sys/vm/unprivileged_userfaultfd 2>/dev/null || echo 0)" = 0 ] && [ "$(id -u)" != 0 ]; then
    skip "uffd: userfaultfd needs root or vm.unprivileged_userfaultfd=1"
else
    "$HANDLER" "$T/uffd.sock" "$T/mem" 2>"$T/uffd.err" &
    HPID=$!; PIDS="$PIDS $HPID"
    wait_sock "$T/uffd.sock" || fail "uffd: the handler never listened"
    SOCK=$T/uffdvm.sock
    start_vmm uffdvm --api-sock "$SOCK" --id uffd-vm
    UVM=$VPID
    wait_sock "$SOCK" || fail "uffd: no socket"
    expect "uffd: PUT /snapshot/load Uffd" PUT /snapshot/load "{\"snapshot_path\":\"$T/snap\",\"mem_backend\":{\"backend_type\":\"Uffd\",\"backend_path\":\"$T/uffd.sock\"},\"resume_vm\":false}" 204 ""
    expect "uffd: PATCH /vm Resumed" PATCH /vm '{"state":"Resumed"}' 204 ""
    check "uffd: the guest counts on from memory served by the handler" wait_ticks "$T/uffdvm.out" 2
    ufirst=$(grep -m1 '^tick ' "$T/uffdvm.out" | cut -d' ' -f2)
    check "uffd: from the snapshot's count (first tick $ufirst, snapshot at $before)" \
        sh -c "[ '$ufirst' -ge '$before' ] && [ '$ufirst' -le $((before + 1)) ]"
    stop_vmm $UVM
    check "uffd: SIGTERM: exit 0 [$EXIT]" [ "$EXIT" = 0 ]
    i=0; while kill -0 $HPID 2>/dev/null && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
    wait $HPID; hrc=$?
    check "uffd: the handler filled pages and ended with moat (exit $hrc: $(cat "$T/uffd.err"))" \
        sh -c "[ $hrc = 0 ] && grep -qE 'copied [1-9]' '$T/uffd.err'"
fi

# The entropy device: PUT /entropy, then a guest that reads random bytes
# from virtio-rng (tests/guests/rng.c) through it.
SOCK=$T/rng.sock
start_vmm rng --api-sock "$SOCK" --id rng-vm
RNGVM=$VPID
wait_sock "$SOCK"
expect "rng: boot-source" PUT /boot-source "{\"kernel_image_path\":\"$GUESTS/rng.elf\"}" 204 ""
expect "rng: PUT /entropy" PUT /entropy '{"rate_limiter":{"bandwidth":{"size":65536,"refill_time":100}}}' 204 ""
expect "rng: InstanceStart" PUT /actions '{"action_type":"InstanceStart"}' 204 ""
guest_done $RNGVM 400 rng
wait $RNGVM; rc=$?
check "rng: the guest read random bytes through the entropy device (exit $rc)" \
    sh -c "[ $rc = 0 ] && grep -q 'rng: ok' '$T/rng.out' && grep -qE 'rng bytes [0-9a-f]{32}' '$T/rng.out'"

# SendCtrlAltDel into a guest that sets the i8042 up as Linux does and
# takes the scan codes on IRQ 1 (tests/guests/kbd.c), then resets (0xFE):
# moat vmm exits 0.
SOCK=$T/kbd.sock
start_vmm kbd --api-sock "$SOCK" --id kbd-vm
KBDVM=$VPID
wait_sock "$SOCK"
expect "kbd: boot-source" PUT /boot-source "{\"kernel_image_path\":\"$GUESTS/kbd.elf\"}" 204 ""
expect "kbd: SendCtrlAltDel before boot: 400" PUT /actions '{"action_type":"SendCtrlAltDel"}' 400 \
    '{"fault_message":"The requested operation is not supported before starting the microVM."}'
expect "kbd: InstanceStart" PUT /actions '{"action_type":"InstanceStart"}' 204 ""
i=0; while ! grep -q 'kbd: ready' "$T/kbd.out" && kill -0 $KBDVM 2>/dev/null && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
check "kbd: the guest set the i8042 up (self-test, CTR, no AUX, keyboard on IRQ 1)" grep -q 'kbd: ready' "$T/kbd.out"
expect "kbd: SendCtrlAltDel" PUT /actions '{"action_type":"SendCtrlAltDel"}' 204 ""
guest_done $KBDVM 200 kbd
wait $KBDVM; rc=$?
check "kbd: the guest got Ctrl+Alt+Del (set 2, pressed and released, one IRQ 1 each) and reset: exit $rc" \
    sh -c "[ $rc = 0 ] && grep -q 'kbd: got 14 11 e0 71 e0 f0 71 f0 11 f0 14' '$T/kbd.out' && grep -q 'kbd: ok' '$T/kbd.out'"

# A guest that powers off: moat vmm exits 0 as Firecracker does.
SOCK=$T/exit.sock
start_vmm exit --api-sock "$SOCK"
EXITVM=$VPID
wait_sock "$SOCK"
expect "exit guest: boot-source" PUT /boot-source "{\"kernel_image_path\":\"$GUESTS/exitcode.elf\"}" 204 ""
expect "exit guest: InstanceStart" PUT /actions '{"action_type":"InstanceStart"}' 204 ""
i=0; while kill -0 $EXITVM 2>/dev/null && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
wait $EXITVM; rc=$?
check "a guest that stops ends moat vmm (exit $rc)" [ "$rc" = 0 ]
[ $fails = 0 ]
