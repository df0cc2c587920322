#!/bin/sh
# tests/includes.sh: the layers' include rules (docs/architecture.md,
# "Layers"), checked on the sources. One PASS or FAIL line per rule; exits
# 1 on any failure. Run from the repository root.
fail=0
check() {   # check NAME OUTPUT: OUTPUT empty -> PASS
    if [ -z "$2" ]; then
        echo "PASS: includes: $1"
    else
        echo "FAIL: includes: $1:"
        echo "$2" | sed 's/^/    /'
        fail=1
    fi
}
lower=$(ls devices/*/*.[ch] boot/*.[ch])
# 1. devices/ and boot/ take from vmm/ only its base (vmm/base/: guest
#    memory, the bus, logging, monotonic time, byte order, whole reads and writes, the memory map).
check "devices/ and boot/ include from vmm/ only vmm/base/" \
    "$(grep -HnE '#[[:space:]]*include[[:space:]]*"vmm/' $lower | grep -v '"vmm/base/')"
# 2. The base includes nothing of moat's but itself (and the public
#    header, whose moat_set_log log.c implements).
check "vmm/base/ includes only vmm/base/ and include/moat.h" \
    "$(grep -HnE '#[[:space:]]*include[[:space:]]*"' vmm/base/*.[ch] | grep -v '"vmm/base/' | grep -v '"include/moat.h"')"
# 3. boot/ is below devices/.
check "boot/ includes nothing from devices/" "$(grep -HnE '#[[:space:]]*include[[:space:]]*"devices/' boot/*.[ch])"
# 4. No KVM in devices/ and boot/: transports do that.
check "devices/ and boot/ include no KVM header" "$(grep -HnE '#[[:space:]]*include[[:space:]]*<linux/kvm' $lower)"
# 5. The library never reaches up into the CLI.
lib=$(ls vmm/*/*.[ch] devices/*/*.[ch] boot/*.[ch] | grep -v '^vmm/cli/')
check "library code includes nothing from vmm/cli/" "$(grep -HnE '#[[:space:]]*include[[:space:]]*"vmm/cli/' $lib)"
# 6. The sandbox layer (vmm/sandbox/) sits above core, snapshot and agent
#    and below the API servers and the CLI: it includes nothing from
#    vmm/cli/ or vmm/api/, and nothing below it includes it.
check "vmm/sandbox/ includes nothing from vmm/cli/ or vmm/api/" \
    "$(grep -HnE '#[[:space:]]*include[[:space:]]*"vmm/(cli|api)/' vmm/sandbox/*.[ch])"
below=$(ls vmm/base/*.[ch] devices/*/*.[ch] boot/*.[ch] vmm/transport/*.[ch] vmm/core/*.[ch] \
           vmm/snapshot/*.[ch] vmm/agent/*.[ch] 2>/dev/null)
check "base/devices/boot/transport/core/snapshot/agent include nothing from vmm/sandbox/" \
    "$(grep -HnE '#[[:space:]]*include[[:space:]]*"vmm/sandbox/' $below)"
# 7. Only the CLI ends the process.
check "only vmm/cli/ calls exit()" \
    "$(grep -HnE '(^|[^_a-zA-Z0-9])exit[[:space:]]*\(' $(ls vmm/*/*.c vmm/api/*/*.c devices/*/*.c boot/*.c | grep -v '^vmm/cli/') |
       grep -Ev '^[^:]*:[0-9]+:[[:space:]]*(/?\*|//)')"
# 8. Every source is in a layer folder.
check "no source directly in vmm/ or devices/" "$(ls vmm/*.[ch] devices/*.[ch] 2>/dev/null)"
# 8. The API servers (vmm/api/: Firecracker's API, the E2B server) sit
#    above the library and below the CLI: they take nothing from vmm/cli/
#    (the CLI hands them what they need, e.g. callbacks), and nothing below
#    them (vmm/base, devices, boot, transport, core, snapshot, agent)
#    includes them.
api=$(ls vmm/api/*.[ch] vmm/api/*/*.[ch] 2>/dev/null)
check "vmm/api/ includes nothing from vmm/cli/" \
    "$(grep -HnE '#[[:space:]]*include[[:space:]]*"vmm/cli/' $api /dev/null)"
below=$(ls vmm/*/*.[ch] devices/*/*.[ch] boot/*.[ch] | grep -Ev '^vmm/(cli|api)/')
check "nothing below vmm/api/ includes vmm/api/" \
    "$(grep -HnE '#[[:space:]]*include[[:space:]]*"vmm/api/' $below /dev/null)"
# 9-13. The library's layers, bottom up: vmm/base < devices/, boot/ <
#    vmm/transport < vmm/core < vmm/agent, vmm/snapshot < (vmm/sandbox) <
#    (vmm/api) < vmm/cli (docs/architecture.md, "Layers"). Each includes
#    nothing from a layer above it; the core reaches the snapshot and agent
#    layers only through the lifecycle hooks they register
#    (vmm/core/vmhooks.h). A folder not there yet has no sources to check.
srcs() { for d in "$@"; do [ -d "$d" ] && find "$d" -name '*.[ch]'; done | sort; }
from() {    # from 'core|snapshot' FILES...: their includes of those vmm/ folders
    pat=$1
    shift
    [ "$#" -gt 0 ] && grep -HnE "#[[:space:]]*include[[:space:]]*\"vmm/($pat)/" "$@"
}
check "vmm/transport/ includes nothing from vmm/core/, vmm/snapshot/, vmm/agent/ or above" \
    "$(from 'core|snapshot|agent|sandbox|api' $(srcs vmm/transport))"
check "vmm/core/ includes nothing from vmm/snapshot/, vmm/agent/ or above" \
    "$(from 'snapshot|agent|sandbox|api' $(srcs vmm/core))"
# moat_restore (vmm/snapshot/) registers the agent's post-restore fix-up:
# the agent is below the snapshot layer, never the other way round.
check "vmm/agent/ includes nothing from vmm/snapshot/ or above" \
    "$(from 'snapshot|sandbox|api' $(srcs vmm/agent))"
check "vmm/snapshot/ includes nothing from vmm/sandbox/ or vmm/api/" \
    "$(from 'sandbox|api' $(srcs vmm/snapshot))"
check "vmm/sandbox/ includes nothing from vmm/api/" "$(from 'api' $(srcs vmm/sandbox))"
# 14. Container images (vmm/image/) sit above the base and below the
#    sandbox layer, the API servers and the CLI, beside the VM layers: they
#    include only vmm/base/ and themselves, and nothing of the VM's layers
#    (base, devices, boot, transport, core, snapshot, agent) includes them.
check "vmm/image/ includes only vmm/base/ and vmm/image/" \
    "$(grep -HnE '#[[:space:]]*include[[:space:]]*"' $(srcs vmm/image) /dev/null | grep -Ev '"vmm/(base|image)/')"
below=$(ls vmm/base/*.[ch] devices/*/*.[ch] boot/*.[ch] vmm/transport/*.[ch] vmm/core/*.[ch] \
           vmm/snapshot/*.[ch] vmm/agent/*.[ch] 2>/dev/null)
check "base/devices/boot/transport/core/snapshot/agent include nothing from vmm/image/" \
    "$(grep -HnE '#[[:space:]]*include[[:space:]]*"vmm/image/' $below /dev/null)"
exit "$fail"
