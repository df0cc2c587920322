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
lower=$(ls devices/*.c devices/*.h boot/*.c boot/*.h)
# 1. devices/ and boot/ take from vmm/ only its base: guest memory, the
#    bus, logging, monotonic time, the memory map.
check "devices/ and boot/ include from vmm/ only gmem.h, bus.h, log.h, clock.h, layout.h" \
    "$(grep -Hn '#include "vmm/' $lower | grep -Ev '"vmm/(gmem|bus|log|clock|layout)\.h"')"
# 2. boot/ is below devices/.
check "boot/ includes nothing from devices/" "$(grep -Hn '#include "devices/' boot/*.c boot/*.h)"
# 3. No KVM in devices/ and boot/: transports do that.
check "devices/ and boot/ include no KVM header" "$(grep -Hn '#include <linux/kvm' $lower)"
# 4. The library never reaches up into the CLI.
lib=$(ls vmm/*.c vmm/*.h devices/*.c devices/*.h boot/*.c boot/*.h | grep -Ev '^vmm/(cli[._]|ctl_proto\.)')
check "library code includes no CLI header (vmm/cli*.h, vmm/ctl_proto.h)" \
    "$(grep -Hn '#include "vmm/\(cli\|ctl_proto\)' $lib)"
# 5. Only the CLI ends the process.
check "only vmm/cli*.c call exit()" \
    "$(grep -HnE '(^|[^_a-zA-Z0-9])exit\(' $(ls vmm/*.c devices/*.c boot/*.c | grep -v '^vmm/cli') |
       grep -Ev '^[^:]*:[0-9]+:[[:space:]]*(/?\*|//)')"
exit "$fail"
