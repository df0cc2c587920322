#!/bin/sh
# tests/contracts.sh: the device contracts (docs/architecture.md, "Adding
# a device"), checked on the sources. One PASS or FAIL line per rule;
# exits 1 on any failure. Run from the repository root.
fail=0
check() {   # check NAME OUTPUT: OUTPUT empty -> PASS
    if [ -z "$2" ]; then
        echo "PASS: contracts: $1"
    else
        echo "FAIL: contracts: $1:"
        echo "$2" | sed 's/^/    /'
        fail=1
    fi
}
# 1. The device table is generic: no kind is named in vmm/core/devtab.c
#    but in its kind list (kinds[] = { ... };). The kinds are those the
#    device headers declare.
kinds=$(grep -hoE 'extern const struct virtio_kind [a-z0-9_]+' devices/*/*.h | awk '{ print $5 }' | sort -u)
if [ -z "$kinds" ]; then
    check "the kinds are found in devices/*/*.h" "no 'extern const struct virtio_kind NAME' found"
else
    pat=$(echo "$kinds" | paste -sd'|')
    check "vmm/core/devtab.c names no kind outside its kind list" \
        "$(awk '/kinds\[\][[:space:]]*=[[:space:]]*\{/ { t = 1 } !t && !/^#[[:space:]]*include/ { print FILENAME ":" FNR ": " $0 } t && /^\};/ { t = 0 }' \
              vmm/core/devtab.c | grep -E "(^|[^A-Za-z0-9_])($pat)([^A-Za-z0-9_]|\$)")"
fi
# 2. The snapshot code knows no legacy device's fields: each device saves,
#    checks and loads its own record (serial_save, i8042_state_check,
#    moatdev_load, ...).
check "vmm/snapshot/ touches no legacy device's fields" \
    "$(grep -HnE '(->|\.)(uart|kbd|ctl)(\.|->)[A-Za-z_]|struct[[:space:]]+(serial|moatdev|i8042)[[:space:]]*\*' \
          vmm/snapshot/*.c)"
exit "$fail"
