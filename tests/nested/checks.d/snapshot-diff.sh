# Diff snapshots through the CLI (docs/snapshot-format.md#diff-snapshots):
# `moat run --diff-snapshots` of the dirty test guest takes a full snapshot
# and three diffs (the first after the guest rewrote 16 MiB), `moat restore
# D` restores the last through the chain and the guest checks every page it
# wrote ("ok", exit 0); the full snapshot alone restores too. With moat and
# moat-san (bench/snapshot-diff.sh prints the times).
t snapshot-diff-cli env DIRTY_MIB=16 MOAT_BIN=build/moat sh bench/snapshot-diff.sh
t snapshot-diff-cli-san env DIRTY_MIB=16 MOAT_BIN=build/moat-san sh bench/snapshot-diff.sh
