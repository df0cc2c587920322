#!/bin/sh
# moat serve's REST API (docs/serve.md) driven with curl, as the E2B SDK
# drives it: the HTTP checks (API key, errors, limits, a slow client) need
# no KVM; the lifecycle checks run sandboxes of a tiny test guest
# (tests/guests, no agent: a template made with --no-agent) and print
# SKIPPED without a usable /dev/kvm. The E2B SDK itself, with Linux guests,
# runs in the nested suite (tests/serve/). One PASS:/FAIL:/SKIPPED: line a
# check.
#
#   MOAT_BIN=build/moat MOAT_GUESTS=build/guests tests/integration/serve-api.sh
set -u
MOAT=${MOAT_BIN:-build/moat}
GUESTS=${MOAT_GUESTS:-build/guests}
case $MOAT in /*) ;; *) MOAT=$PWD/$MOAT ;; esac
case $GUESTS in /*) ;; *) GUESTS=$PWD/$GUESTS ;; esac
T=$(mktemp -d /tmp/moat-serve.XXXXXX)
export MOAT_HOME=$T/h
export MOAT_SERVE_REAP_INTERVAL=0.2
fails=0
SPID=""
SLOWPID=""
cleanup() {
    [ "$fails" != 0 ] && [ -f "$T/serve.log" ] && { echo "moat serve's log:"; tail -40 "$T/serve.log"; }
    [ -n "$SLOWPID" ] && kill "$SLOWPID" 2>/dev/null
    [ -n "$SPID" ] && kill "$SPID" 2>/dev/null && wait "$SPID" 2>/dev/null
    if [ -d "$MOAT_HOME" ]; then
        for d in "$MOAT_HOME"/*; do
            [ -f "$d/config" ] && "$MOAT" rm -f "$(basename "$d")" >/dev/null 2>&1
        done
    fi
    rm -rf "$T"
}
trap cleanup EXIT INT TERM

SUITE=serve-api
. "$(dirname "$0")/checks.sh"
need_tools curl python3
probe_kvm

# Ports: two free ones in a range other tests do not use.
PORT=$((20000 + $$ % 20000))
EPORT=$((PORT + 1))
API=http://127.0.0.1:$PORT

start_serve() {   # start_serve ARGS...: moat serve in the background, waits for its port
    "$MOAT" serve --api 127.0.0.1:$PORT --envd 127.0.0.1:$EPORT "$@" >>"$T/serve.log" 2>&1 &
    SPID=$!
    i=0
    while [ $i -lt 100 ]; do
        curl -s -o /dev/null "$API/health" && return 0
        kill -0 $SPID 2>/dev/null || return 1
        sleep 0.05; i=$((i + 1))
    done
    return 1
}
stop_serve() {
    kill -TERM "$SPID" 2>/dev/null
    wait "$SPID"
    rc=$?
    SPID=""
    return $rc
}
# req METHOD PATH [BODY]: the status in $T/st, the body in $T/body, headers in $T/hdr
req() {
    if [ $# -ge 3 ]; then
        curl -s -o "$T/body" -D "$T/hdr" -w '%{http_code}' -X "$1" -H "X-API-KEY: $KEY" \
            -H 'Content-Type: application/json' --data-binary "$3" "$API$2" >"$T/st"
    else
        curl -s -o "$T/body" -D "$T/hdr" -w '%{http_code}' -X "$1" -H "X-API-KEY: $KEY" "$API$2" >"$T/st"
    fi
}
st() { cat "$T/st"; }
body_has() { grep -q -- "$1" "$T/body"; }
is_err() {   # is_err STATUS: that status with E2B's error JSON {code: STATUS, message}
    [ "$(st)" = "$1" ] && body_has "\"code\":$1" && body_has '"message":"'
}
json() {   # json EXPR: a value from $T/body (python3's json)
    python3 -c "import json,sys; d=json.load(open('$T/body')); print($1)"
}

# ---- the command line ----
"$MOAT" serve --api nowhere 2>"$T/err"; r=$?
check "a bad --api is a usage error" test $r = 2 -a -n "$(grep -- '--api' "$T/err")"
"$MOAT" serve --api-key short 2>"$T/err"; r=$?
check "a short API key is refused" test $r = 2
check "moat --help lists serve and template" sh -c "'$MOAT' --help | grep -q '^  serve' && '$MOAT' --help | grep -q '^  template'"

# ---- the generated key ----
if ! start_serve; then
    fail "moat serve starts ($(tail -3 "$T/serve.log"))"
    exit 1
fi
check "the API key is made 0600 in \$MOAT_HOME/serve/api-key" \
    test "$(stat -c %a "$MOAT_HOME/serve/api-key" 2>/dev/null)" = 600
KEY=$(cat "$MOAT_HOME/serve/api-key")
check "the key looks like E2B's (e2b_ + 40 hex)" sh -c "echo '$KEY' | grep -Eq '^e2b_[0-9a-f]{40}$'"

# ---- HTTP: key, errors, limits ----
s=$(curl -s -o "$T/body" -w '%{http_code}' "$API/v2/sandboxes")
check "no API key: 401 with an error JSON" sh -c "[ $s = 401 ] && grep -q '\"code\":401' '$T/body'"
s=$(curl -s -o "$T/body" -w '%{http_code}' -H 'X-API-KEY: e2b_wrongwrongwrongwrong' "$API/v2/sandboxes")
check "a wrong API key: 401" sh -c "[ $s = 401 ] && grep -q 'invalid API key' '$T/body'"
s=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $KEY" "$API/v2/sandboxes")
check "the key as a bearer token is accepted" test "$s" = 200
s=$(curl -s -o /dev/null -w '%{http_code}' "$API/health")
check "GET /health needs no key" test "$s" = 200
req GET /v2/sandboxes
check "an empty list: 200 []" sh -c "[ $(st) = 200 ] && [ \"\$(cat '$T/body')\" = '[]' ]"
req POST /v2/sandboxes '{"templateID":'
check "bad JSON: 400" is_err 400
req POST /v2/sandboxes '{"templateID":"base","timeout":"x"}'
check "a field of the wrong type: 400 naming it" sh -c "grep -q timeout '$T/body' && [ $(st) = 400 ]"
req POST /v2/sandboxes '{"templateID":"nosuch"}'
check "an unknown template: 404" sh -c "grep -q \"template 'nosuch' not found\" '$T/body' && [ $(st) = 404 ]"
req GET /v2/nothing
check "an unknown route: 404" is_err 404
req PUT /sandboxes/abc '{}'
check "a known path with another method: 405" is_err 405
req GET /sandboxes/-x
check "a malformed sandbox id: 400" is_err 400
for p in "GET /sandboxes/nosuch" "DELETE /sandboxes/nosuch" "POST /sandboxes/nosuch/pause" \
         "POST /v2/sandboxes/nosuch/connect" "POST /sandboxes/nosuch/timeout" "GET /sandboxes/nosuch/metrics" \
         "POST /sandboxes/nosuch/fork" "POST /sandboxes/nosuch/snapshots" "DELETE /templates/nosuch"; do
    set -- $p
    if [ "$1" = POST ]; then req "$1" "$2" '{"timeout":5}'; else req "$1" "$2"; fi
    check "unknown sandbox: $p is 404" is_err 404
done
req GET '/v2/sandboxes?limit=0'
check "a bad query: 400" is_err 400
req GET '/v2/sandboxes?bogus=1'
check "an unknown query parameter: 400" is_err 400
head -c 70000 /dev/zero | tr '\0' 'a' >"$T/big"
s=$(curl -s -o "$T/body" -w '%{http_code}' -H "X-API-KEY: $KEY" --data-binary @"$T/big" "$API/v2/sandboxes")
check "an oversized body: 413" sh -c "[ $s = 413 ] && grep -q '\"code\":413' '$T/body'"
s=$(curl -s -o "$T/body" -w '%{http_code}' -H "X-API-KEY: $KEY" -H 'Transfer-Encoding: chunked' \
    --data-binary @"$T/big" "$API/v2/sandboxes")
check "an oversized chunked body: 413" test "$s" = 413
s=$(printf '{"templateID":"nosuch"}' | curl -s -o "$T/body" -w '%{http_code}' -H "X-API-KEY: $KEY" \
    -H 'Transfer-Encoding: chunked' --data-binary @- "$API/v2/sandboxes")
check "a chunked body is read" sh -c "[ $s = 404 ] && grep -q nosuch '$T/body'"
# A slow client: a request whose body never ends does not hold up another.
python3 -c "
import socket, time
s = socket.create_connection(('127.0.0.1', $PORT))
s.send(b'POST /v2/sandboxes HTTP/1.1\r\nHost: x\r\nX-API-KEY: $KEY\r\nContent-Length: 100\r\n\r\n{')
time.sleep(20)
" &
SLOWPID=$!
sleep 0.3
t0=$(date +%s%N)
s=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -H "X-API-KEY: $KEY" "$API/v2/sandboxes")
t1=$(date +%s%N)
check "a slow client does not stall another request ($(( (t1 - t0) / 1000000 )) ms)" test "$s" = 200
kill $SLOWPID 2>/dev/null; wait $SLOWPID 2>/dev/null; SLOWPID=""
s=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$EPORT/health")
check "envd: GET /health naming no sandbox is refused with 400 ($s)" test "$s" = 400
check "SIGTERM stops moat serve with status 0" stop_serve

# ---- --api-key-file ----
printf 'given-key-0123456789\n' >"$T/keyfile"
start_serve --api-key-file "$T/keyfile" || fail "moat serve --api-key-file starts"
s=$(curl -s -o /dev/null -w '%{http_code}' -H 'X-API-KEY: given-key-0123456789' "$API/v2/sandboxes")
s2=$(curl -s -o /dev/null -w '%{http_code}' -H "X-API-KEY: $KEY" "$API/v2/sandboxes")
check "--api-key-file: its key works, the stored one does not" test "$s/$s2" = 200/401
stop_serve

# ---- lifecycle, with sandboxes of a tiny guest ----
if [ "$KVM" = 0 ]; then
    skip "sandbox lifecycle: $KVM_WHY"
    [ $fails = 0 ] && exit 0 || exit 1
fi
if [ ! -f "$GUESTS/wsread.elf" ]; then
    fail "no test guest $GUESTS/wsread.elf (make test-guests)"
    exit 1
fi
"$MOAT" template create tiny --no-agent --mem 64 --kernel "$GUESTS/wsread.elf" --cmdline ws=0 >"$T/out" 2>&1
check "moat template create (a tiny guest, no agent)" grep -qx tiny "$T/out"
start_serve || fail "moat serve starts again"
req POST /v2/sandboxes '{"templateID":"tiny","metadata":{"user":"alice","n":"1"},"envVars":{"FOO":"bar"},"timeout":300}'
check "create: 201" test "$(st)" = 201
A=$(json "d['sandboxID']" 2>/dev/null)
check "create: the Sandbox shape (sandboxID, templateID, clientID, envdVersion 0.5.7, a 32-hex token)" \
    sh -c "[ -n '$A' ] && [ \"\$(python3 -c \"import json; d=json.load(open('$T/body')); print(d['templateID'], d['envdVersion'], len(d['envdAccessToken']), len(d['clientID']))\")\" = 'tiny 0.5.7 32 32' ]"
TOKA=$(json "d['envdAccessToken']" 2>/dev/null)
s=$(curl -s -o /dev/null -w '%{http_code}' -H "E2b-Sandbox-Id: $A" -H "X-Access-Token: $TOKA" "http://127.0.0.1:$EPORT/health")
check "envd: GET /health of a created sandbox with its token is 204 ($s)" test "$s" = 204
s=$(curl -s -o /dev/null -w '%{http_code}' -H "E2b-Sandbox-Id: $A" -H "X-Access-Token: x$TOKA" "http://127.0.0.1:$EPORT/health")
check "envd: GET /health with a wrong token is 401 ($s)" test "$s" = 401
check "the sandbox is a moat sandbox (moat ls: running)" sh -c "'$MOAT' ls | grep -q '^$A .*running'"
check "its serve.json is 0600 and holds its token and envVars" \
    sh -c "[ \$(stat -c %a '$MOAT_HOME/$A/serve.json') = 600 ] && grep -q '$TOKA' '$MOAT_HOME/$A/serve.json' && grep -q FOO '$MOAT_HOME/$A/serve.json'"
req POST /v2/sandboxes '{"templateID":"tiny","metadata":{"user":"bob"}}'
B=$(json "d['sandboxID']" 2>/dev/null)
req POST /v2/sandboxes '{"templateID":"tiny","metadata":{"user":"alice","n":"2"},"autoPause":true,"timeout":300}'
C=$(json "d['sandboxID']" 2>/dev/null)
check "three sandboxes at once, distinct ids" sh -c "[ -n '$B' ] && [ -n '$C' ] && [ '$A' != '$B' ] && [ '$B' != '$C' ]"
TOKB=$(python3 -c "import json; print(json.load(open('$MOAT_HOME/$B/serve.json'))['envdAccessToken'])")
check "each sandbox has its own access token" test "$TOKA" != "$TOKB"

req GET "/sandboxes/$A"
check "info: 200, running, metadata, no network said" sh -c "[ $(st) = 200 ] && grep -q '\"state\":\"running\"' '$T/body' && grep -q '\"user\":\"alice\"' '$T/body' && grep -q '\"allowInternetAccess\":false' '$T/body' && grep -q '\"moatNetwork\":\"none: the sandbox has no network device\"' '$T/body' && grep -q '\"denyOut\":\[\"0.0.0.0/0\"\]' '$T/body' && grep -q '\"memoryMB\":64' '$T/body'"
# tiny has no network device: a create that asks for some is refused, and leaves nothing
n0=$("$MOAT" ls | wc -l)
req POST /v2/sandboxes '{"templateID":"tiny","allow_internet_access":true}'
check "create asking for the internet on a template without a network device: 400, nothing left" \
    sh -c "[ \$(cat '$T/st') = 400 ] && grep -q 'has no network device' '$T/body' && [ \$('$MOAT' ls | wc -l) = $n0 ]"
req POST /v2/sandboxes '{"templateID":"tiny","network":{"allowOut":["example.com"]}}'
check "create with a domain name in allowOut: 400 naming it" sh -c "[ \$(cat '$T/st') = 400 ] && grep -q 'example.com' '$T/body'"
# list: all, paging by X-Next-Token, filters
req GET /v2/sandboxes
check "list: three" test "$(json 'len(d)')" = 3
# list_pages QUERY: every page of /v2/sandboxes?QUERYlimit=1 by X-Next-Token
# (ids: the ids in page order, each followed by a space; pages: how many)
list_pages() {
    ids=""
    next=""
    pages=0
    while :; do
        req GET "/v2/sandboxes?${1}limit=1${next:+&nextToken=$next}"
        ids="$ids$(json "' '.join(x['sandboxID'] for x in d)") "
        pages=$((pages + 1))
        next=$(sed -n 's/^[Xx]-[Nn]ext-[Tt]oken: *\([^\r]*\).*/\1/p' "$T/hdr" | tr -d '\r')
        [ -z "$next" ] || [ $pages -gt 5 ] && break
    done
}
list_pages ""
sorted=$(echo $A $B $C | tr ' ' '\n' | sort | tr '\n' ' ')
check "list: limit=1 pages by X-Next-Token through all three, each once ($pages pages)" \
    test "$(echo $ids | tr ' ' '\n' | sort | tr '\n' ' ')" = "$sorted" -a $pages = 3
# order=asc|desc: by start time (A, B, C were created in turn), paged with limit=1
for ord in asc desc; do
    list_pages "order=$ord&"
    if [ $ord = asc ]; then want="$A $B $C "; else want="$C $B $A "; fi
    check "list order=$ord: by start time across pages of one ($ids)" test "$ids" = "$want"
done
req GET "/v2/sandboxes?order=desc&nextToken=$A"
check "list order=desc with a token of a listing by id: 400" is_err 400
req GET '/v2/sandboxes?metadata=user%3Dalice'
check "list: a metadata filter" test "$(json 'len(d)')" = 2
req GET '/v2/sandboxes?metadata=user%3Dalice%26n%3D2'
check "list: two metadata pairs must both match" test "$(json "d[0]['sandboxID'] if len(d)==1 else ''")" = "$C"
req GET '/v2/sandboxes?template=other'
check "list: a template filter" test "$(json 'len(d)')" = 0

# pause / connect
req POST "/sandboxes/$B/pause"
check "pause: 204, the sandbox stopped (moat ls)" sh -c "[ $(st) = 204 ] && '$MOAT' ls | grep -q '^$B .*stopped'"
req POST "/sandboxes/$B/pause"
check "pause of a paused sandbox: 409" is_err 409
req GET '/v2/sandboxes?state=paused'
check "list state=paused: only it" test "$(json "','.join(x['sandboxID'] for x in d)")" = "$B"
req GET '/v2/sandboxes?state=running'
check "list state=running: the other two" test "$(json 'len(d)')" = 2
req POST "/v2/sandboxes/$B/connect" '{"timeout":120}'
check "connect of a paused sandbox: 201, running again" \
    sh -c "[ $(st) = 201 ] && grep -q '\"sandboxID\":\"$B\"' '$T/body' && '$MOAT' ls | grep -q '^$B .*running'"
req POST "/v2/sandboxes/$B/connect" '{}'
check "connect of a running sandbox: 200" test "$(st)" = 200
req GET "/sandboxes/$B/metrics"
check "metrics: samples of the sandbox's moat process (kept every 5 s, or one taken now), in time order" \
    sh -c "[ $(st) = 200 ] && [ \"\$(python3 -c \"import json; d=json.load(open('$T/body')); t=[x['timestampUnix'] for x in d]; print(len(d) >= 1, all(x['memUsed'] > 0 and x['memTotal'] == 67108864 for x in d), t == sorted(t))\")\" = 'True True True' ]"
now=$(date +%s)
req GET "/sandboxes/$A/metrics?start=$((now - 3600))&end=$((now + 5))"
check "metrics over a range that holds now: samples in it" \
    sh -c "[ $(st) = 200 ] && python3 -c \"import json,sys; d=json.load(open('$T/body')); sys.exit(not d or not all($now - 3600 <= x['timestampUnix'] <= $now + 6 for x in d))\""
req GET "/sandboxes/$A/metrics?start=$((now + 1000))"
check "metrics over a range in the future: none" sh -c "[ $(st) = 200 ] && [ \"\$(cat '$T/body')\" = '[]' ]"
req GET "/sandboxes/$A/metrics?start=yesterday"
check "metrics with a start that is not Unix seconds: 400" is_err 400

# fork, snapshots
req POST "/sandboxes/$A/fork" '{"count":2,"timeout":300}'
check "fork count 2: two sandboxes" sh -c "[ $(st) = 200 ] && [ \"\$(python3 -c \"import json; d=json.load(open('$T/body')); print(sum(1 for x in d if 'sandbox' in x))\")\" = 2 ]"
F1=$(json "d[0]['sandbox']['sandboxID']" 2>/dev/null)
check "a fork keeps its parent's metadata" sh -c "grep -q alice '$MOAT_HOME/$F1/serve.json'"
req POST "/sandboxes/$A/snapshots" '{"name":"snapA"}'
check "snapshot: 201 {snapshotID, names}" sh -c "[ $(st) = 201 ] && grep -q '\"snapshotID\":\"snapA\"' '$T/body'"
req POST "/sandboxes/$A/snapshots" '{"name":"snapA"}'
check "a snapshot name in use: 409" is_err 409
req GET "/snapshots?sandboxID=$A"
check "GET /snapshots lists it" test "$(json "','.join(x['snapshotID'] for x in d)")" = snapA
req POST /v2/sandboxes '{"templateID":"snapA"}'
S=$(json "d.get('sandboxID','')" 2>/dev/null)
check "create from the snapshot" sh -c "[ $(st) = 201 ] && '$MOAT' ls | grep -q '^$S .*running'"
req DELETE /templates/snapA
check "delete the snapshot: 204, gone from moat template ls" \
    sh -c "[ $(st) = 204 ] && ! '$MOAT' template ls | grep -q snapA"
# E2B's team/name:tag form: a moat template name, shown as asked
req POST "/sandboxes/$A/snapshots" '{"name":"team/snap:v1"}'
check "snapshot named team/snap:v1: 201, its id the moat name, its name as asked" \
    sh -c "[ $(st) = 201 ] && grep -q '\"snapshotID\":\"team_2fsnap_3av1\"' '$T/body' && grep -q '\"names\":\[\"team/snap:v1\"\]' '$T/body'"
req GET '/snapshots?name=team%2Fsnap%3Av1'
check "GET /snapshots?name=team/snap:v1 lists it" test "$(json "','.join(x['names'][0] for x in d)")" = team/snap:v1
req POST /v2/sandboxes '{"templateID":"team/snap:v1"}'
S2=$(json "d.get('sandboxID','')" 2>/dev/null)
check "create from team/snap:v1" sh -c "[ $(st) = 201 ] && '$MOAT' ls | grep -q '^$S2 .*running'"
req DELETE "/sandboxes/$S2"
req DELETE /templates/team_2fsnap_3av1
check "delete it by its id: 204" test "$(st)" = 204

# restart: the sandboxes survive, the reaper goes on from serve.json
stop_serve
start_serve || fail "moat serve starts a third time"
req GET /v2/sandboxes
check "after a restart of moat serve, its sandboxes are still listed" test "$(json 'len(d)')" = 6

# timeouts: kill, or with autoPause stop
req POST "/sandboxes/$A/timeout" '{"timeout":1}'
check "timeout: 204" test "$(st)" = 204
req POST "/sandboxes/$C/timeout" '{"timeout":1}'
i=0
while [ $i -lt 100 ] && [ -d "$MOAT_HOME/$A" ]; do sleep 0.1; i=$((i + 1)); done
check "a sandbox past its timeout is killed (gone from moat ls)" sh -c "! '$MOAT' ls | grep -q '^$A '"
i=0
while [ $i -lt 100 ] && ! "$MOAT" ls | grep -q "^$C .*stopped"; do sleep 0.1; i=$((i + 1)); done
check "with autoPause it is paused instead (moat ls: stopped)" sh -c "'$MOAT' ls | grep -q '^$C .*stopped'"
req GET "/sandboxes/$C"
check "... and reported paused" grep -q '"state":"paused"' "$T/body"
req GET "/sandboxes/$A"
check "the killed one is 404" is_err 404

# kill
req DELETE "/sandboxes/$B"
check "kill: 204, the moat sandbox removed" sh -c "[ $(st) = 204 ] && [ ! -d '$MOAT_HOME/$B' ]"
req DELETE "/sandboxes/$B"
check "kill again: 404 (the SDK's false)" is_err 404
req GET "/sandboxes/template.tiny"
check "a template is not reachable as a sandbox" is_err 404
# creates at once (forks of one template do not wait for each other)
cpids=""
for i in 1 2 3 4; do
    curl -s -o "$T/par$i" -w '%{http_code}' --max-time 60 -H "X-API-KEY: $KEY" \
        --data-binary '{"templateID":"tiny"}' "$API/v2/sandboxes" >"$T/parst$i" &
    cpids="$cpids $!"
done
for p in $cpids; do wait "$p"; done
ok=0
for i in 1 2 3 4; do
    [ "$(cat "$T/parst$i")" = 201 ] && ok=$((ok + 1))
    python3 -c "import json; print(json.load(open('$T/par$i'))['sandboxID'])" >>"$T/parids" 2>/dev/null
done
check "four creates at once: four sandboxes, four ids, all running" sh -c \
    "[ $ok = 4 ] && [ \$(sort -u '$T/parids' | wc -l) = 4 ] && for x in \$(cat '$T/parids'); do '$MOAT' ls | grep -q \"^\$x .*running\" || exit 1; done"
check "SIGTERM stops moat serve; its sandboxes go on" sh -c "kill -TERM $SPID; wait $SPID 2>/dev/null; '$MOAT' ls | grep -q '^$S .*running'"
SPID=""

[ $fails = 0 ] && exit 0 || exit 1
