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
    "$(grep -HnE '(^|[^_a-zA-Z0-9])exit[[:space:]]*\(' $(ls vmm/*/*.c devices/*/*.c boot/*.c | grep -v '^vmm/cli/') |
       grep -Ev '^[^:]*:[0-9]+:[[:space:]]*(/?\*|//)')"
# 8. Every source is in a layer folder.
check "no source directly in vmm/ or devices/" "$(ls vmm/*.[ch] devices/*.[ch] 2>/dev/null)"
exit "$fail"
