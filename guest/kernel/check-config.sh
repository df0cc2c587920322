#!/bin/sh
# check-config.sh FRAGMENT DOTCONFIG
# Fails (exit 1, one line per problem) unless every option in FRAGMENT ended
# up in DOTCONFIG exactly as requested. "# CONFIG_X is not set" in the
# fragment is satisfied by the same line or by CONFIG_X being absent
# (an option whose dependencies are unmet is not written at all).
set -eu
frag=$1
cfg=$2
[ -r "$frag" ] || { echo "check-config: cannot read $frag" >&2; exit 2; }
[ -r "$cfg" ] || { echo "check-config: cannot read $cfg" >&2; exit 2; }
bad=0
n=0
while IFS= read -r line; do
    case $line in
    CONFIG_*=*)
        sym=${line%%=*}
        n=$((n + 1))
        if ! grep -qxF -- "$line" "$cfg"; then
            got=$(grep -E "^(# )?$sym[= ]" "$cfg" || true)
            echo "check-config: wanted '$line', got '${got:-<absent>}'" >&2
            bad=1
        fi
        ;;
    "# CONFIG_"*" is not set")
        sym=${line#\# }
        sym=${sym%% *}
        n=$((n + 1))
        if grep -qE "^$sym=" "$cfg"; then
            echo "check-config: wanted '$line', got '$(grep -E "^$sym=" "$cfg")'" >&2
            bad=1
        fi
        ;;
    esac
done < "$frag"
if [ "$bad" -ne 0 ]; then
    echo "check-config: FAILED: $cfg does not match $frag" >&2
    exit 1
fi
echo "check-config: all $n options in $frag are set as requested"
