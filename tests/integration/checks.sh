# Shared by the curl-driven integration scripts (fc-api.sh, serve-api.sh):
# sourced after SUITE (the name in each line), MOAT and fails=0 are set.
# pass/fail/skip print one counted line; check NAME COND-COMMAND... runs the
# command and passes or fails NAME on its status; need_tools TOOL... skips
# the whole script when one is missing; the host probe sets KVM (1/0) and
# KVM_WHY, and MOAT_REQUIRE_KVM makes a host without KVM a failure.
pass() { echo "PASS: $SUITE: $1"; }
fail() { echo "FAIL: $SUITE: $1"; fails=$((fails + 1)); }
skip() { echo "SKIPPED: $SUITE: $1"; }
check() {   # check NAME COND-COMMAND...
    name=$1; shift
    if "$@"; then pass "$name"; else fail "$name"; fi
}
need_tools() {
    for tool in "$@"; do
        if ! command -v $tool >/dev/null; then
            echo "SKIPPED: $SUITE: $tool is not installed (scripts/deps.sh installs it)"
            exit 0
        fi
    done
}
probe_kvm() {
    if [ "$("$MOAT" host --kind 2>/dev/null)" = none ]; then
        KVM=0; KVM_WHY="no usable KVM ($("$MOAT" host --reason 2>/dev/null))"
    else
        KVM=1
    fi
    [ -n "${MOAT_REQUIRE_KVM:-}" ] && [ "${MOAT_REQUIRE_KVM}" != 0 ] && [ "$KVM" = 0 ] &&
        { fail "KVM required (MOAT_REQUIRE_KVM) but $KVM_WHY"; exit 1; }
    return 0
}
